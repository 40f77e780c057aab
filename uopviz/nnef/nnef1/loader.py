"""NNEF 1.0 models (``graph.nnef`` + ``.dat`` files) on the SkriptND graph model.

The ``nnef`` package (the Khronos parser, ``import nnef``) reads the NNEF 1.0 text and fills in
every attribute's default; each operation is then translated to an invocation of the SkriptND
standard library (``nn.conv``, ``math.add``, ...) — a SkriptND ``graph`` that the ordinary
composer builds into a :class:`~uopviz.nnef.graph.Graph` with the 1.0 tensor names, so it lowers,
compiles and runs like any SkriptND model. The generated text is kept (``graph.source``) and
errors quote it, with the index and name of the 1.0 operation at the end of each line.

Differences of the two versions the translation bridges: 1.0 shapes have implicit trailing
singleton dimensions (binary operations align left), biases and normalisation parameters are
``[1, C]``, padding is a list of ``(before, after)`` pairs (empty: "same", output
``ceil(input / stride)``), pooling sizes cover every dimension, a ``border`` names the padding
method, ``reshape`` copies dimensions given as 0, ``slice`` ends at the extent for an end of 0.

Every fragment of the 1.0 standard library is translated (the ``nnef`` package's list; its shape
table also names ``max_unpool`` and ``avg_unpool``, which its parser does not know). Compound
fragments are written out from their 1.0 definitions (separable convolutions as two, the local and
L1 normalisations, the quantisations, ``softabs``, ``copy_n``, the ROI aligns as a resample and a
pooling); the sliding-window primitives SkriptND has no operator for (``argmax_pool``, ``sample``,
``desample``, ``debox``, ``roi_resample``) are operators of the helper module ``nnef1.sknd``.
Borders: 'constant' pads with zeros that take part, 'ignore' leaves the padding out, 'reflect',
'replicate' and 'reflect-even' pad the input as ``pad`` does before a conv or pooling without
padding; the transposed operations (``deconv``, ``debox``, ``desample``) take 'constant' and
'ignore' only. ``argmax_pool``'s index is the flat row-major position inside the window, and ROI
rows are ``[start.., end..]`` along the spatial axes, as the SkriptND ROI pools read them: the 1.0
text leaves both open. Fragments a graph file defines itself (``KHR_enable_fragment_definitions``)
are expanded into their bodies by the parser; one without a body is an error.

This module reads the 1.0 files (text, quantisation, ``.dat`` data through :mod:`uopviz.nnef.data`),
translates a graph (:func:`translate`) and composes the result; the text being written is a
:class:`~uopviz.nnef.nnef1.translation.Translation`, filled by the translators of
:mod:`uopviz.nnef.nnef1.operations` (the operations) and :mod:`uopviz.nnef.nnef1.compound` (the
compound fragments written out).
"""
from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from uopviz.core.progress import progress_reporter
from uopviz.nnef.composition.composer import Composer
from uopviz.nnef.composition.stdlib import ModuleSet, read_source_text
from uopviz.nnef.data import inside_folder, read_variable
from uopviz.nnef.errors import NNEFError, register_source
from uopviz.nnef.graph import Graph
from uopviz.nnef.model.canonical import canonicalize
from uopviz.nnef.nnef1.canonical import rewrite_spellings
from uopviz.nnef.nnef1.compound import COMPOUND_TRANSLATORS
from uopviz.nnef.nnef1.operations import OPERATION_TRANSLATORS
from uopviz.nnef.nnef1.process import parse_nnef1
from uopviz.nnef.nnef1.translation import SKRIPTND_TYPES, Translation, import_nnef, literal
from uopviz.nnef.syntax import ast
from uopviz.nnef.syntax.parser import parse_module

__all__ = ["SUPPORTED", "load_nnef1", "loads_nnef1", "translate"]

#: The translator of each 1.0 operation (the graph's inputs, variables and constants are read by
#: :func:`translate` itself).
_TRANSLATORS: dict[str, Callable[[Translation, Any], None]] = {
    **OPERATION_TRANSLATORS, **COMPOUND_TRANSLATORS
}
SUPPORTED = frozenset(_TRANSLATORS) | {"external", "variable", "constant"}


def translate(graph: Any) -> tuple[str, dict[str, str], dict[str, str]]:
    """SkriptND text for a parsed NNEF 1.0 graph (shapes inferred), the variables' labels by
    SkriptND name, and the SkriptND name of every 1.0 tensor."""
    t = Translation(graph)
    inputs, variables, constants = [], [], []
    for index, op in enumerate(graph.operations):
        t.index, t.op_name = index, op.name
        output = next(iter(op.outputs.values()))
        if op.name == "external":
            shape_text = literal(list(op.attribs["shape"]))
            inputs.append(f"{t.name(output)}: {SKRIPTND_TYPES[op.dtype]}{shape_text};")
        elif op.name == "variable":
            shape_text = literal(list(op.attribs["shape"]))
            variables.append(f"{t.name(output)}: {SKRIPTND_TYPES[op.dtype]}{shape_text};")
            t.labels[t.name(output)] = op.attribs["label"]
        elif op.name == "constant":
            shape, value = list(op.attribs["shape"]), list(op.attribs["value"])
            value_text = literal(value[0] if len(value) == 1 else value)
            constants.append(f"{t.name(output)}: {SKRIPTND_TYPES[op.dtype]}{literal(shape)} = {value_text};")
        else:
            translator = _TRANSLATORS.get(op.name)
            if translator is None:
                raise NNEFError(
                    f"NNEF 1.0 operation {index} '{op.name}' is not supported by uopviz "
                    f"(supported: {', '.join(sorted(SUPPORTED))})"
                )
            translator(t, op)
    outputs = [
        f"{t.name(name)}: {SKRIPTND_TYPES.get(graph.tensors[name].dtype, 'real')};" for name in graph.outputs
    ]
    blocks = [f"    @input {{ {' '.join(inputs)} }}", f"    @output {{ {' '.join(outputs)} }}"]
    if variables:
        blocks.append("    @variable {\n        " + "\n        ".join(variables) + "\n    }")
    if constants:
        blocks.append("    @constant {\n        " + "\n        ".join(constants) + "\n    }")
    blocks.append("    @compose {\n" + "\n".join(t.lines) + "\n    }")
    if t.updates:
        blocks.append("    @update {\n" + "\n".join(t.updates) + "\n    }")
    quantized = _quantize_lines(t)
    if quantized:
        blocks.append("    @quantize {\n" + "\n".join(quantized) + "\n    }")
    imports = "import layout, math, nn, linalg, image, quant" + (", nnef1;" if t.uses_helpers else ";")
    text = f"{imports}\n\ngraph {graph.name} {{\n" + "\n".join(blocks) + "\n}\n"
    return text, dict(t.labels), dict(t.names)


#: The 1.0 quantisation algorithms (``graph.quant``) that SkriptND's quant module has: the name
#: there and the attributes the 1.0 one leaves implicit.
_QUANTIZERS = {
    "linear_quantize": ("quant.min_max_linear_quantize", {"signed": False, "symmetric": False}),
    "min_max_linear_quantize": ("quant.min_max_linear_quantize", {}),
    "zero_point_linear_quantize": ("quant.zero_point_linear_quantize", {}),
}


def _quantization(info: Any) -> tuple[str, dict[str, Any]] | None:
    """A tensor's 1.0 quantisation (from ``graph.quant``) as (algorithm, attributes); None if none."""
    given = getattr(info, "quantization", None)
    if not given:
        return None
    attribs = {}
    for key, value in given.items():
        if key == "op-name":
            continue
        array = np.asarray(value)
        attribs[key] = array.item() if array.size == 1 else array.reshape(-1).tolist()
    return given["op-name"], attribs


def _quantize_lines(t: Translation) -> list[str]:
    """The ``@quantize`` entries of the tensors whose 1.0 quantisation SkriptND's quant module has."""
    lines = []
    for name, info in t.graph.tensors.items():
        found = _quantization(info)
        if found is None or found[0] not in _QUANTIZERS:
            continue
        operator, implicit = _QUANTIZERS[found[0]]
        attribs = ", ".join(f"{key}={literal(value)}" for key, value in {**found[1], **implicit}.items())
        lines.append(f"        {t.name(name)}: {operator}{{{attribs}}};")
    return lines


def _keep_other_quantizations(parsed: Any, composed: Graph) -> None:
    """Quantisations SkriptND has no operator for (logarithmic_quantize, a custom one) are kept as
    annotations of their tensors, named as in ``graph.quant``."""
    for name, info in parsed.tensors.items():
        found = _quantization(info)
        tensor = composed.tensors.get(name)
        if found is not None and found[0] not in _QUANTIZERS and tensor is not None:
            tensor.quantization = {"op": found[0], "attribs": found[1], "types": ()}


def _parse(
    text: str,
    file: str,
    quantization: str | None = None,
    quantization_file: str = "<quantization>",
) -> Any:
    """The ``nnef`` package's parse of ``text`` (with the quantisation text ``quantization``), its own
    fragments expanded and its shapes inferred, run in a child process: the package's C parser can
    crash on malformed input (see :mod:`uopviz.nnef.nnef1.process`)."""
    import_nnef()
    refuse_wide_integers(text, file)
    if quantization is not None:
        refuse_wide_integers(quantization, quantization_file)
    return parse_nnef1(text, None, file, quantization=quantization, quantization_file=quantization_file)


#: The largest integer the ``nnef`` package's parser reads as written: it keeps 32 bits of an
#: integer literal, so ``shape = [4294967299]`` would silently become ``[3]`` and ``2**62`` ``0``.
MAX_NNEF1_INTEGER = (1 << 31) - 1

# NNEF 1.0 tokens that may hold digits: comments, strings, identifiers and numbers (an integer has
# neither a point nor an exponent)
_DIGIT_TOKENS = re.compile(r"#[^\n]*|'[^'\n]*'|\"[^\"\n]*\"|[A-Za-z_][A-Za-z0-9_]*"
                           r"|\d*\.\d+(?:[eE][+-]?\d+)?|(\d+)(\.\d*)?(?:[eE][+-]?\d+)?")


def refuse_wide_integers(text: str, file: str) -> None:
    """An NNEFError naming ``file``, the line and column of the first integer literal of NNEF 1.0
    ``text`` that the ``nnef`` package's parser cannot read exactly (above 2**31 - 1)."""
    for token in _DIGIT_TOKENS.finditer(text):
        digits = token.group(1)
        if digits is None or token.group(0) != digits or int(digits) <= MAX_NNEF1_INTEGER:
            continue
        start = token.start()
        line = text.count("\n", 0, start) + 1
        column = start - (text.rfind("\n", 0, start) + 1) + 1
        raise NNEFError(
            f"NNEF 1.0: the integer {digits} is above {MAX_NNEF1_INTEGER}, the largest the nnef package's "
            "parser reads exactly: it keeps 32 bits, so an extent this large would silently become another "
            "(a wrong shape)",
            file, line, column, source=text,
        )


HELPER_MODULE_PATH = Path(__file__).with_name("nnef1.sknd")


@functools.cache
def helper_module() -> ast.Module:
    """The parsed helper module ``nnef1`` (``nnef1.sknd``): the 1.0 sliding-window primitives that
    the standard library lacks (argmax_pool, sample, desample, debox, roi_resample)."""
    text = HELPER_MODULE_PATH.read_text()
    register_source(str(HELPER_MODULE_PATH), text)
    return parse_module(text, str(HELPER_MODULE_PATH))


def _imports_helpers(text: str) -> bool:
    """Whether a translated text imports the helper module."""
    return text.startswith("import") and "nnef1;" in text.split("\n", 1)[0]


def _compose_translation(
    graph: Any,
    source_name: str,
    data: Callable[[str, Any], np.ndarray | None],
    attribs: Mapping[str, Any] | None,
    progress: Any = None,
) -> Graph:
    # the 1.0 spellings of one meaning brought to one form (uopviz.nnef.nnef1.canonical)
    spelled = rewrite_spellings(graph)
    text, labels, names = translate(graph)
    file = f"{source_name} (as SkriptND)"
    register_source(file, text)
    modules = ModuleSet(None)
    if _imports_helpers(text):
        modules.add("nnef1", helper_module())
    modules.add("main", parse_module(text, file))

    def variable_data(name: str, info: Any) -> np.ndarray | None:
        label = labels.get(name)
        return None if label is None else data(label, info)

    with progress_reporter(progress, len(graph.operations), "composing") as report:
        composed = Composer(modules, variable_data, report).compose("main", None, attribs)
    composed.source = text
    composed.canonical = spelled
    canonicalize(composed)  # converters' spellings of parameters, computed once (uopviz.nnef.model.canonical)
    renamed = {skriptnd: original for original, skriptnd in names.items() if skriptnd != original}
    if renamed:
        _restore_names(composed, renamed)
    _keep_other_quantizations(graph, composed)
    return composed


def _restore_names(graph: Graph, renamed: dict[str, str]) -> None:
    """Give the tensors whose 1.0 names are SkriptND keywords their 1.0 names back."""

    def fix(value: Any) -> Any:
        if isinstance(value, list):
            return [fix(item) for item in value]
        if isinstance(value, tuple):
            return tuple(fix(item) for item in value)
        return renamed.get(value, value) if isinstance(value, str) else value

    graph.tensors = {renamed.get(name, name): info for name, info in graph.tensors.items()}
    for name, info in graph.tensors.items():
        info.name = name
    for op in graph.operations:
        op.inputs, op.outputs = fix(op.inputs), fix(op.outputs)
    graph.inputs, graph.outputs = fix(graph.inputs), fix(graph.outputs)


def load_nnef1(
    path: str | os.PathLike,
    attribs: Mapping[str, Any] | None = None,
    fetch: Callable[[Path], None] | None = None,
    progress: Any = None,
) -> Graph:
    """An NNEF 1.0 folder (``graph.nnef`` + ``<label>.dat``, and ``graph.quant`` if there) or
    ``graph.nnef`` file as a Graph.

    ``fetch`` (archives) brings a data file into the folder before it is read; ``progress`` as in
    :mod:`uopviz.core.progress`."""
    path = Path(path)
    folder = path if path.is_dir() else path.parent
    graph_file = folder / "graph.nnef" if path.is_dir() else path
    root = folder.resolve()
    inside_folder(root, graph_file, "the graph file")
    text = read_source_text(graph_file)
    register_source(str(graph_file), text)
    quant_file = graph_file.with_name("graph.quant")
    quant_path = inside_folder(root, quant_file, "the quantization file")
    quantization = read_source_text(quant_file) if quant_path.is_file() else None
    parsed = _parse(text, str(graph_file), quantization, str(quant_file))

    def data(label: str, info: Any) -> np.ndarray | None:
        candidate = root / f"{label.lstrip('/')}.dat"
        if fetch is not None:
            fetch(candidate)
        file = inside_folder(root, candidate, f"the data file of label '{label}'")
        if not file.is_file():
            return None
        return read_variable(file, info.dtype, info.shape, f"variable '{info.name}' (label '{label}')")

    return _compose_translation(parsed, str(graph_file), data, attribs, progress)


def loads_nnef1(
    text: str,
    variables: Mapping[str, np.ndarray] | None = None,
    attribs: Mapping[str, Any] | None = None,
    progress: Any = None,
    quantization: str | None = None,
) -> Graph:
    """NNEF 1.0 text as a Graph; ``variables`` maps labels to data; ``progress`` as in
    :mod:`uopviz.core.progress`; ``quantization`` is the text of a ``graph.quant`` file (each
    tensor's quantisation is kept as ``graph.tensors[name].quantization``)."""
    parsed = _parse(text, "<string>", quantization)
    given = dict(variables or {})
    return _compose_translation(parsed, "<nnef 1.0>", lambda label, info: given.get(label), attribs, progress)
