"""Standalone reports (uopviz.report, `uopviz report`) from sources that build UOps and traces;
reports of compiled tensors are in test_report_program.py. No browser (see tests/browser)."""

from __future__ import annotations

import re
import textwrap
from html.parser import HTMLParser
from pathlib import Path

import pytest

from uopviz.cli import main as cli_main
from uopviz.report import ReportError, load_source, write_report
from uopviz.widgets.embed import GZIP_TYPE, JSON_TYPE, embedded_state

SOURCE = textwrap.dedent("""
    import uopviz as uv
    from uopviz import Ops, PatternMatcher, UOp, UPat, dtypes, graph_rewrite

    RULES = PatternMatcher([(UPat(Ops.ADD, src=(UPat.var("x"), UPat.var("x"))), lambda x: x * 2,
                             "x+x -> x*2")])

    def main():
        x = UOp.buffer({size}, dtypes.float32)
        y = (x + x).recip() + (x + x)
        with uv.tracing() as trace:
            z = graph_rewrite(y, RULES, name="double")
        return {{"graph": y, "rewrites": trace}}
""")


class Collector(HTMLParser):
    """Every tag with its attributes, and the JSON state blocks."""

    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.states: list[dict] = []
        self._in_state: str | None = None

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        self.tags.append((tag, attributes))
        kind = attributes.get("type")
        self._in_state = kind if tag == "script" and kind in (JSON_TYPE, GZIP_TYPE) else None

    def handle_data(self, data):
        if self._in_state:
            self.states.append(embedded_state(self._in_state, data))
            self._in_state = None


def parse(path: Path) -> Collector:
    collector = Collector()
    collector.feed(path.read_text())
    return collector


@pytest.mark.parametrize("size", [4, 16, 33])
def test_report_of_a_python_source_is_self_contained(tmp_path, size):
    source = tmp_path / "build.py"
    source.write_text(SOURCE.format(size=size))
    out = write_report(source, tmp_path / "out" / "report.html")
    page = parse(out)
    for tag, attributes in page.tags:  # nothing is loaded from anywhere
        assert "src" not in attributes or attributes["src"].startswith("data:"), (tag, attributes)
        if tag == "link":
            assert not re.match(r"https?:|//", attributes.get("href", "")), attributes
    kinds = sorted(state["kind"] for state in page.states)
    assert kinds == ["dag", "player"]
    dag = next(s for s in page.states if s["kind"] == "dag")
    assert sorted(n["op"] for n in dag["graph"]["nodes"]) == ["ADD", "ADD", "BUFFER", "RECIP"]
    player = next(s for s in page.states if s["kind"] == "player")
    keys = player["frames"][str(player["position"][0])]
    frames = [player["frame_table"][key] for key in keys]
    steps = next(p["steps"] for p in player["passes"] if p["name"] == "double")
    assert len(set(keys)) == len(keys) == 1 + steps
    assert frames[0]["rule"] == "" and frames[1]["rule"] == "x+x -> x*2"
    assert frames[1]["location"].endswith("build.py:5")
    assert all(n["k"] in player["node_table"] for f in frames for n in f["graph"]["nodes"])
    assert "buf" in out.read_text() and "UOPVIZ.mountStatic" in out.read_text()


def test_module_level_values_are_found_without_main(tmp_path):
    source = tmp_path / "values.py"
    source.write_text(
        "from uopviz import UOp, dtypes\nu = UOp.buffer(4, dtypes.float32) * 2.0\n_hidden = u\nn = 3\n"
    )
    assert [name for name, _ in load_source(source)] == ["u"]


@pytest.mark.parametrize(
    "text,message",
    [
        ("x = 1\n", "builds no Tensor, Program, Kernel, UOp or Trace"),
        ("def main():\n    return 5\n", "found main\\(\\): int"),
        ("raise RuntimeError('boom')\n", "running it failed: RuntimeError: boom"),
    ],
)
def test_bad_sources_say_why(tmp_path, text, message):
    source = tmp_path / "bad.py"
    source.write_text(text)
    with pytest.raises(ReportError, match=message):
        load_source(source)


def test_missing_and_unknown_sources(tmp_path):
    with pytest.raises(ReportError, match="no such file"):
        load_source(tmp_path / "nothing.py")
    other = tmp_path / "model.onnx"
    other.write_bytes(b"\0")
    with pytest.raises(ReportError, match="not a source uopviz can report"):
        load_source(other)


def test_cli_report_writes_the_file_and_exits_2_on_bad_input(tmp_path, capsys):
    source = tmp_path / "build.py"
    source.write_text(SOURCE.format(size=8))
    out = tmp_path / "r.html"
    assert cli_main(["report", str(source), "-o", str(out), "--no-timing"]) == 0
    assert out.is_file() and "wrote" in capsys.readouterr().out
    assert cli_main(["report", str(tmp_path / "missing.py"), "-o", str(out)]) == 2
    assert "no such file" in capsys.readouterr().err


def test_report_of_an_nnef_model_shows_its_operator_graph(tmp_path):
    source = tmp_path / "model.sknd"
    source.write_text(textwrap.dedent("""\
        import nn;
        graph G {
          @input { x: real[1, 3, 8, 8]; }
          @output { y: real; }
          @variable { w: real[4, 3, 3, 3]; b: real[4]; }
          @compose { c = nn.conv{padding=[1, 1, 1, 1]}(x, w, b); y = nn.relu(c); }
        }
    """))
    out = write_report(source, tmp_path / "model.html", time_kernels=False)
    page = parse(out)
    operators = next(s for s in page.states if s["kind"] == "dag" and any(
        n["op"] == "nn.conv" for n in s["graph"]["nodes"]))
    ops = sorted(n["op"] for n in operators["graph"]["nodes"])
    assert "nn.conv" in ops and "nn.relu" in ops
    labels = [edge[3] for edge in operators["graph"]["edges"] if len(edge) > 3 and edge[3]]
    assert any("[1, 4, 8, 8]" in label for label in labels)  # the conv's output tensor on its edge
    assert "operator graph" in out.read_text()
