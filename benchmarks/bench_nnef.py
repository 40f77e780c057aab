"""NNEF: composing models and lowering + compiling their kernels.

Cases
- standard library: parse from text (cold) and load from the disk cache;
- AlexNet of §2.1 (corrected): compose (target 16 ms, the Khronos C++ reference's time), with and
  without parsing the model text; peer: the ``nnef`` package (Khronos C++ parser and shape
  inference) on the same network written in NNEF 1.0;
- a 300-operation ResNet-style graph: compose;
- lowering (@lower → kernel ASTs) and lowering + compiling every kernel (python backend; AlexNet
  also on C when a compiler is present);
- running what is decided at run time, on C when a compiler is present (else python): a ``while``
  loop (host loop, body and condition programs per iteration; peer: the same loop in numpy) and a
  data-dependent extent (``nonzero`` then a reduction over the counted extent; peer: numpy).
"""

from __future__ import annotations

import os
import tempfile
import time

from run import measure, row

import uopviz as uv
from uopviz.nnef.composition.composer import Composer
from uopviz.nnef.composition.stdlib import ModuleSet
from uopviz.nnef.lowering.operation_lowering import lower_operation
from uopviz.nnef.program.compile import compile_graph
from uopviz.nnef.syntax.parser import parse_module

# the AlexNet of §2.1 the package ships (tests and notebook 04 read it too), with conv7 reading flat1
ALEXNET = uv.nnef.examples.text("alexnet", fixed=True)

ALEXNET_NNEF1 = """
version 1.0;
graph AlexNet( input ) -> ( output )
{
    input = external<scalar>(shape = [1, 3, 224, 224]);
    kernel1 = variable<scalar>(shape = [64, 3, 11, 11], label = 'k1');
    bias1 = variable<scalar>(shape = [1, 64], label = 'b1');
    kernel2 = variable<scalar>(shape = [192, 64, 5, 5], label = 'k2');
    bias2 = variable<scalar>(shape = [1, 192], label = 'b2');
    kernel3 = variable<scalar>(shape = [384, 192, 3, 3], label = 'k3');
    bias3 = variable<scalar>(shape = [1, 384], label = 'b3');
    kernel4 = variable<scalar>(shape = [384, 384, 3, 3], label = 'k4');
    bias4 = variable<scalar>(shape = [1, 384], label = 'b4');
    kernel5 = variable<scalar>(shape = [256, 384, 3, 3], label = 'k5');
    bias5 = variable<scalar>(shape = [1, 256], label = 'b5');
    kernel6 = variable<scalar>(shape = [4096, 256, 5, 5], label = 'k6');
    bias6 = variable<scalar>(shape = [1, 4096], label = 'b6');
    kernel7 = variable<scalar>(shape = [4096, 4096], label = 'k7');
    bias7 = variable<scalar>(shape = [1, 4096], label = 'b7');
    kernel8 = variable<scalar>(shape = [1000, 4096], label = 'k8');
    bias8 = variable<scalar>(shape = [1, 1000], label = 'b8');
    conv1 = conv(input, kernel1, bias1, padding = [(0,0), (0,0)], stride = [4, 4]);
    relu1 = relu(conv1);
    pool1 = max_pool(relu1, size = [1, 1, 3, 3], stride = [1, 1, 2, 2],
                     padding = [(0,0), (0,0), (0,0), (0,0)]);
    conv2 = conv(pool1, kernel2, bias2, padding = [(2,2), (2,2)]);
    relu2 = relu(conv2);
    pool2 = max_pool(relu2, size = [1, 1, 3, 3], stride = [1, 1, 2, 2],
                     padding = [(0,0), (0,0), (0,0), (0,0)]);
    conv3 = conv(pool2, kernel3, bias3, padding = [(1,1), (1,1)]);
    relu3 = relu(conv3);
    conv4 = conv(relu3, kernel4, bias4, padding = [(1,1), (1,1)]);
    relu4 = relu(conv4);
    conv5 = conv(relu4, kernel5, bias5, padding = [(1,1), (1,1)]);
    relu5 = relu(conv5);
    pool3 = max_pool(relu5, size = [1, 1, 3, 3], stride = [1, 1, 2, 2],
                     padding = [(0,0), (0,0), (0,0), (0,0)]);
    conv6 = conv(pool3, kernel6, bias6, padding = [(0,0), (0,0)]);
    relu6 = relu(conv6);
    flat1 = reshape(relu6, shape = [1, -1]);
    conv7 = linear(flat1, kernel7, bias7);
    relu7 = relu(conv7);
    conv8 = linear(relu7, kernel8, bias8);
    output = softmax(conv8);
}
"""


def resnet_text(blocks: int = 60, channels: int = 16, size: int = 8) -> str:
    """A ResNet-style graph: a stem and ``blocks`` residual blocks of 5 operations each."""
    variables = [f"stem: real[{channels}, 3, 3, 3];"]
    lines = ["h0 = nn.conv(input, stem);"]
    for block in range(1, blocks + 1):
        variables.append(f"w{block}a: real[{channels}, {channels}, 3, 3]; b{block}a: real[{channels}];")
        variables.append(f"w{block}b: real[{channels}, {channels}, 3, 3]; b{block}b: real[{channels}];")
        previous = f"h{block - 1}"
        lines += [
            f"c{block}a = nn.conv({previous}, w{block}a, b{block}a);",
            f"r{block}a = nn.relu(c{block}a);",
            f"c{block}b = nn.conv(r{block}a, w{block}b, b{block}b);",
            f"s{block} = math.add(c{block}b, {previous});",
            f"h{block} = nn.relu(s{block});",
        ]
    lines.append(f"output = nn.softmax(h{blocks});")
    return (
        "import nn; import math;\ngraph ResNet {\n"
        f"  @input {{ input: real[1, 3, {size}, {size}]; }}\n  @output {{ output: real; }}\n"
        "  @variable {\n    " + "\n    ".join(variables) + "\n  }\n"
        "  @compose {\n    " + "\n    ".join(lines) + "\n  }\n}\n"
    )


def _compose(module, name: str = "main"):
    modules = ModuleSet(None)
    modules.add(name, module)
    return Composer(modules).compose(name)


def _stdlib_rows() -> list[dict]:
    from uopviz.nnef.composition.stdlib import STDLIB_DIR, stdlib_modules

    texts = {path: path.read_text() for path in sorted(STDLIB_DIR.glob("*.sknd"))}
    parse = measure(
        lambda: [parse_module(text, str(path)) for path, text in texts.items()], repeat=3, warmup=0
    )
    with tempfile.TemporaryDirectory() as cache:
        previous = os.environ.get("UOPVIZ_CACHE")
        os.environ["UOPVIZ_CACHE"] = cache

        def from_cache():
            stdlib_modules(reread=True)

        from_cache()  # writes the cache
        cached = measure(from_cache, repeat=3, warmup=0)
        if previous is None:
            os.environ.pop("UOPVIZ_CACHE")
        else:
            os.environ["UOPVIZ_CACHE"] = previous
    stdlib_modules(reread=True)  # this process's copy from the real cache again
    return [
        row("stdlib: parse all modules", parse, notes=f"{len(texts)} modules; once per process"),
        row("stdlib: load from the disk cache", cached, peer="parse", peer_s=parse, notes="pickled trees"),
    ]


WHILE = """import math;
graph Halve {
    @input { x0: real[64]; }
    @output { z: real; n: int; }
    @compose {
        z, n = with x = x0, k = 0 while { m = math.max_reduce(x); c = math.ge(m, 1.0); yield c; }
            do { h = math.mul(x, 0.5); k1 = math.add(k, 1); yield h, k1; };
    }
}
"""

NONZERO = """import math; import layout;
graph Count {
    @input { x: real[32, 32]; }
    @output { s: int; }
    @compose { i = layout.nonzero(x); j = math.add(i, 1); s = math.sum_reduce{axes=[1]}(j); }
}
"""


def _run_time_rows() -> list[dict]:
    import numpy as np

    backend = "c" if "c" in uv.backends.available() else "python"
    halve = uv.nnef.loads(WHILE)
    x0 = np.linspace(-3.0, 1000.0, 64, dtype=np.float32)  # 10 iterations
    halve.run({"x0": x0}, backend=backend)  # compiles the body and the condition

    def numpy_halve():
        x, k = x0, 0
        while x.max() >= 1.0:
            x, k = x * 0.5, k + 1
        return x, k

    trips = int(halve.run({"x0": x0}, backend=backend)["n"])
    loop = measure(lambda: halve.run({"x0": x0}, backend=backend), repeat=5)
    count = uv.nnef.loads(NONZERO)
    x = np.where(np.random.default_rng(0).random((32, 32)) < 0.3, 1.0, 0.0).astype(np.float32)
    counted = measure(lambda: count.run({"x": x}, backend=backend), repeat=5)
    peer = measure(lambda: (np.stack(np.nonzero(x)) + 1).sum(1), repeat=5)
    return [
        row(
            f"while loop: run ({trips} iterations)",
            loop,
            peer="numpy",
            peer_s=measure(numpy_halve, repeat=5),
            notes=f"{backend} backend; host loop, 2 programs per iteration; "
            f"{loop / max(trips, 1) * 1e6:.0f} us per iteration",
        ),
        row(
            "nonzero + sum over the counted extent: run",
            counted,
            peer="numpy",
            peer_s=peer,
            notes=f"{backend} backend; 32x32 input, ~30% nonzero; kernels gated by the counter",
        ),
    ]


def run() -> list[dict]:
    rows = _stdlib_rows()
    alexnet_module = parse_module(ALEXNET, "alexnet.sknd")
    compose_only = measure(lambda: _compose(alexnet_module), repeat=7)
    with_parse = measure(lambda: _compose(parse_module(ALEXNET, "alexnet.sknd")), repeat=7)
    try:
        import nnef

        def khronos():
            graph = nnef.parse_string(ALEXNET_NNEF1)
            nnef.infer_shapes(graph)

        peer = measure(khronos, repeat=7)
        peer_name = "nnef (Khronos C++, 1.0)"
    except ImportError:
        peer, peer_name = None, ""
    rows.append(
        row(
            "AlexNet: compose (parsed module)",
            compose_only,
            peer=peer_name,
            peer_s=peer,
            notes=f"target <= 16 ms: {'met' if compose_only <= 0.016 else 'MISSED'}; stdlib cached",
        )
    )
    rows.append(
        row(
            "AlexNet: parse + compose",
            with_parse,
            peer=peer_name,
            peer_s=peer,
            notes="peer parses NNEF 1.0 text and infers shapes",
        )
    )
    resnet_module = parse_module(resnet_text(), "resnet.sknd")
    resnet = _compose(resnet_module)
    rows.append(
        row(
            f"ResNet-style: compose {len(resnet.operations)} operations",
            measure(lambda: _compose(resnet_module), repeat=5),
            notes="60 residual blocks, 16x8x8",
        )
    )
    alexnet = _compose(alexnet_module)
    lowering = measure(lambda: [lower_operation(alexnet, op) for op in alexnet.operations], repeat=5)
    kernels = sum(len(lower_operation(alexnet, op)) for op in alexnet.operations)
    rows.append(row(f"AlexNet: @lower -> {kernels} kernel ASTs", lowering))
    resnet_lowering = measure(lambda: [lower_operation(resnet, op) for op in resnet.operations], repeat=3)
    rows.append(row(f"ResNet-style: @lower -> kernel ASTs ({len(resnet.operations)} ops)", resnet_lowering))
    start = time.perf_counter()
    compile_graph(_compose(alexnet_module), backend="python")
    rows.append(
        row("AlexNet: lower + compile all kernels", time.perf_counter() - start, notes="python backend")
    )
    if "c" in uv.backends.available():
        start = time.perf_counter()
        compile_graph(_compose(alexnet_module), backend="c")
        rows.append(
            row(
                "AlexNet: lower + compile all kernels",
                time.perf_counter() - start,
                notes="c backend (compiler cache may be warm)",
            )
        )
    rows.extend(_run_time_rows())
    start = time.perf_counter()
    program = compile_graph(_compose(resnet_module), backend="python")
    rows.append(
        row(
            f"ResNet-style: lower + compile {len(program.items)} kernels",
            time.perf_counter() - start,
            notes="python backend",
        )
    )
    return rows
