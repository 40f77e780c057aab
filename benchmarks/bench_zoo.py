"""The model zoo at full size (``benchmarks/zoo.py``): NNEF 1.0 folders loaded, compiled and run,
against ONNX Runtime on the same network, input and weights, in the same run.

Each model runs in a child process of its own with an empty uopviz cache (``UOPVIZ_CACHE`` set
to a fresh temporary folder), so load and compile are cold: nothing parsed, lowered or compiled
before.  The child writes the NNEF 1.0 folder (untimed), then times

- load: ``uv.nnef.load(folder)`` (the Khronos parser, translation, composition, ``.dat`` weights);
- compile: ``g.compile(backend, opts="heuristic")`` (lowering, fusion, the pipeline, the C compiler or LLVM);
- inference: the median of ``g.run`` on a 224x224 input (after the first run);
- time by kind: each kernel alone (conv, pooling, linear, elementwise, copies) against ONNX
  Runtime's own profile of the same model (``zoo_breakdown``);
- peer: ONNX Runtime's CPU provider (2 intra-op threads) on the ONNX form of the same network;
- the largest absolute error of our output against the numpy reference (float64), and relative
  to the largest output;
- warm: load + compile of the same folder again in another child with the cache the first one
  filled (as a user opening the model again: the composed graph, the whole program and every
  compiled kernel come from the persistent caches);

and, in this process, a one-operation NNEF 1.0 graph loaded and run the first time, and each
stage's 3x3 convolution of ResNet-50 alone (GFLOP/s against ONNX Runtime's on the same weights, both
also as shares of the multiply-add peak of the same threads measured in the run: ``fma_peak.py``).

Environment: ``UOPVIZ_ZOO_MODELS`` (comma-separated, default: every model) and
``UOPVIZ_ZOO_BACKENDS`` (default ``c,llvm``) choose what runs, ``UOPVIZ_ZOO_BATCH`` the batches
(default ``1,8``: batch 8 for the models of ``UOPVIZ_ZOO_BATCHED``, default ResNet-50 and
MobileNet-v2), ``UOPVIZ_ZOO_OPTS=none`` compiles without the heuristic's optimizations; a child
that takes more than ``UOPVIZ_ZOO_TIMEOUT`` seconds (default 600) becomes an error row.

The child is this file run as a script: ``python benchmarks/bench_zoo.py resnet50 c [batch]``
prints one JSON object (``... warm resnet50 c``: load + compile again with the cache the first
child filled, in a new process; ``... conv c``: the single convolutions' times and errors;
``... kernels resnet50 c [converted]``: where a model's inference time goes, each kernel's median
time bound to its arrays, slowest first, with the sum and ``graph.run``'s median; ``converted``:
of the folder nnef-tools writes from the ONNX form).

The converter's spelling (``... converted resnet50 c``): the ONNX form of the network is written
and converted to NNEF 1.0 by Khronos' ``nnef-tools`` (``python -m nnef_tools.convert``), run in
the Python that ``UOPVIZ_NNEF_TOOLS_PYTHON`` names (default: this one) as a subprocess, never
imported here; the converted folder, our own folder of the same network and ONNX Runtime on that
very ONNX file are timed in one child, in four blocks each that alternate (our two folders' and
ONNX Runtime's: consecutive calls of one model each, all three timed the same way; median and best
of 16 each)
(``UOPVIZ_ZOO_CONVERTED``: the models, default ``resnet50,mobilenet_v2``).  Without nnef-tools
those rows say so and are skipped.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
MODELS = (
    "alexnet", "vgg16", "resnet18", "resnet50", "densenet121", "inception_v1", "mobilenet_v2", "squeezenet",
    "lstm",
)  # fmt: skip
BACKENDS = ("c", "llvm")
ORT_THREADS = 2
# the pipeline's hand-coded optimizations (register tiles, threads, vectors); UOPVIZ_ZOO_OPTS=none
# compiles without any (faster to compile, slower to run)
OPTS = None if os.environ.get("UOPVIZ_ZOO_OPTS", "heuristic") == "none" else "heuristic"


def _child(model: str, backend: str, batch: int = 1) -> dict:
    """Runs in the child process: the measurements of one model on one backend at ``batch``, with
    the time of each kind of work, ours and ONNX Runtime's (:mod:`zoo_breakdown`)."""
    import numpy as np
    import zoo
    import zoo_breakdown
    import zoo_onnx
    from run import measure

    import uopviz as uv

    net = zoo.BUILDERS[model]()
    net = zoo.batched(net, batch) if batch != 1 else net
    x = net.input_data()
    folder = zoo.write_nnef1(net, _model_folder_in_cache(model, batch))
    started = time.perf_counter()
    graph = uv.nnef.load(folder)
    loaded = time.perf_counter()
    program = graph.compile(backend, opts=OPTS)
    compiled = time.perf_counter()
    inputs = {net.input_name: x}
    out = graph.run(inputs, backend=backend, opts=OPTS)[net.output]
    first = time.perf_counter() - compiled
    ours = measure(lambda: graph.run(inputs, backend=backend, opts=OPTS), repeat=5, warmup=1, min_time_s=0.0)
    session = zoo_onnx.ort_session(net, ORT_THREADS)
    peer = measure(lambda: session.run(None, inputs), repeat=5, warmup=1, min_time_s=0.0)
    expected = zoo.reference(net, x)
    error = float(np.abs(out - expected).max())
    onnx_model = zoo_onnx.onnx_model(net).SerializeToString()
    kernels = zoo_breakdown.our_kernels(graph, program, inputs)
    nodes = zoo_breakdown.ort_nodes(onnx_model, inputs, ORT_THREADS)
    return {
        "load_s": loaded - started,
        "compile_s": compiled - loaded,
        "first_run_s": first,
        "inference_s": ours,
        "peer_s": peer,
        "error": error,
        "relative_error": error / float(np.abs(expected).max()),
        "operations": len(graph.operations),
        "kernels": len(program.kernels),
        "by_kind": zoo_breakdown.by_kind(kernels),
        "peer_by_kind": zoo_breakdown.by_kind(nodes),
        "conv_pairs": [list(pair) for pair in zoo_breakdown.paired_convolutions(kernels, nodes)],
        "compiled": len(set(program.sources)),
        "onnxruntime": __import__("onnxruntime").__version__,
    }


def _model_folder_in_cache(model: str, batch: int) -> Path:
    """Where a child writes the model's NNEF 1.0 folder: beside the cache of the run, so that the
    warm child opens the very folder the first one loaded (and it goes with the cache)."""
    return Path(os.environ["UOPVIZ_CACHE"]) / "models" / f"{model}-batch{batch}"


def _warm_child(model: str, backend: str) -> dict:
    """Runs in a child process after :func:`_child`, with its cache: the same folder loaded and
    compiled again in a new process (the composed graph, the program and every compiled kernel hits
    of the persistent caches)."""
    import uopviz as uv

    folder = _model_folder_in_cache(model, 1)
    started = time.perf_counter()
    graph = uv.nnef.load(folder)
    loaded = time.perf_counter()
    graph.compile(backend, opts=OPTS)
    compiled = time.perf_counter()
    return {"load_s": loaded - started, "compile_s": compiled - loaded}


def _measure_in_child(
    model: str, backend: str, timeout: float, mode: tuple[str, ...] = (), extra: tuple[str, ...] = (),
    warm: bool = False,
) -> dict:
    """The child's measurements, with an empty cache of its own; ``warm``: then load + compile again
    in another child with that cache (``warm_load_s``, ``warm_compile_s``)."""
    with tempfile.TemporaryDirectory(prefix="uopviz-zoo-cache-") as cache:
        found = _run_child([*mode, model, backend, *extra], cache, timeout, f"{model} on {backend}")
        if warm:
            again = _run_child(["warm", model, backend], cache, timeout, f"{model} on {backend}, warm")
            found.update({f"warm_{key}": value for key, value in again.items()})
    return found


def _run_child(arguments: list[str], cache: str, timeout: float, what: str) -> dict:
    result = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), *arguments],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "UOPVIZ_CACHE": cache},
        cwd=BENCH_DIR.parent,
    )
    if result.returncode != 0:
        raise RuntimeError(f"{what} failed:\n{result.stderr.strip()[-2000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


ONE_OPERATION = """version 1.0;
graph G( x ) -> ( y )
{{
    x = external<scalar>(shape = [4, {width}]);
    y = relu(x);
}}
"""


def _one_operation(backend: str, width: int, folder: Path) -> float:
    """Seconds to load a one-operation NNEF 1.0 graph of a shape not seen before and run it once."""
    import numpy as np

    import uopviz as uv

    model = folder / backend / f"relu{width}"
    model.mkdir(parents=True)
    (model / "graph.nnef").write_text(ONE_OPERATION.format(width=width))
    x = np.ones((4, width), np.float32)
    started = time.perf_counter()
    uv.nnef.load(model).run({"x": x}, backend=backend)
    return time.perf_counter() - started


def _one_operation_rows(backends: list[str]) -> list[dict]:
    """A one-operation graph loaded and run the first time (its kernel compiled, an empty cache),
    median over graphs of new shapes, once the process has loaded the NNEF standard library."""
    import statistics

    from run import row

    rows = []
    previous = os.environ.get("UOPVIZ_CACHE")
    with tempfile.TemporaryDirectory(prefix="uopviz-zoo-one-") as folder:
        os.environ["UOPVIZ_CACHE"] = str(Path(folder) / "cache")
        try:
            for backend in backends:
                _one_operation(backend, 3, Path(folder))  # the standard library and the backend
                times = [_one_operation(backend, 16 + width, Path(folder)) for width in range(9)]
                rows.append(
                    row(
                        f"one-operation NNEF 1.0 graph ({backend}): load + first run",
                        statistics.median(times),
                        notes="relu of a [4, n] input, a new n each time: the kernel compiles; "
                        "median of 9, empty cache",
                    )
                )
        finally:
            if previous is None:
                os.environ.pop("UOPVIZ_CACHE", None)
            else:
                os.environ["UOPVIZ_CACHE"] = previous
    return rows


#: ResNet-50's 3x3 convolutions (channels, input size): each stage's, alone in a graph
CONV_SHAPES = ((64, 56), (128, 28), (256, 14), (512, 7))


def _conv_nets() -> list:
    import zoo

    nets = []
    for channels, size in CONV_SHAPES:
        net = zoo.Network(f"conv{channels}x{size}", "input", (1, channels, size, size))
        net.output = net.conv("input", channels, 3)
        nets.append(net)
    return nets


def _conv_child(backend: str) -> dict:
    """Runs in a child process of its own per backend (two backends' thread pools, or ONNX Runtime's
    and numpy's, keep spinning after a call and take the cores from the next one's kernels): the
    median inference of each conv and its largest error against numpy, measured after all of them."""
    import numpy as np
    import zoo
    from run import measure

    import uopviz as uv

    times, outputs = {}, {}
    for net in _conv_nets():
        inputs = {net.input_name: net.input_data()}
        with tempfile.TemporaryDirectory(prefix="uopviz-zoo-conv-") as folder:
            zoo.write_nnef1(net, folder)
            graph = uv.nnef.load(folder)
            outputs[net.name] = graph.run(inputs, backend=backend, opts=OPTS)[net.output]
            times[net.name] = measure(
                lambda graph=graph, inputs=inputs: graph.run(inputs, backend=backend, opts=OPTS),
                repeat=5, warmup=1, min_time_s=0.0,
            )  # fmt: skip
    errors = {
        net.name: float(np.abs(outputs[net.name] - zoo.reference(net, net.input_data())).max())
        for net in _conv_nets()
    }
    return {"times": times, "errors": errors}


def _conv_rows(backends: list[str], timeout: float) -> list[dict]:
    """One 3x3 convolution (padding 1) of each ResNet-50 stage as an NNEF 1.0 graph, run against ONNX
    Runtime on the same weights: the GFLOP/s of our conv kernels (with their padded input copy)."""
    import zoo_onnx
    from run import measure, row

    ours = {}
    for backend in backends:
        try:
            ours[backend] = _measure_in_child("conv", backend, timeout)
        except Exception as error:  # noqa: BLE001 - one backend's failure is its own row
            ours[backend] = error
    peak = _fma_peak(ORT_THREADS)
    rows = []
    for net in _conv_nets():
        x = net.input_data()
        session = zoo_onnx.ort_session(net, ORT_THREADS)
        peer = measure(
            lambda session=session, x=x, net=net: session.run(None, {net.input_name: x}),
            repeat=5, warmup=1, min_time_s=0.0,
        )  # fmt: skip
        channels, size = net.input_shape[1], net.input_shape[2]
        flops = 2 * channels * channels * 9 * size * size
        for backend in backends:
            case = f"conv 3x3 {channels} channels {size}x{size} NNEF 1.0 ({backend}): inference"
            found = ours[backend]
            if isinstance(found, Exception):
                rows.append({"case": case, "status": "error", "notes": f"{type(found).__name__}: {found}"})
                continue
            seconds = found["times"][net.name]
            rows.append(
                row(
                    case,
                    seconds,
                    peer=f"onnxruntime CPU ({ORT_THREADS} threads)",
                    peer_s=peer,
                    notes=f"{flops / seconds / 1e9:.1f} GFLOP/s (onnxruntime {flops / peer / 1e9:.1f})"
                    f"{_of_peak(flops / seconds, flops / peer, peak)}, graph.run including its host work; "
                    f"max error vs numpy {found['errors'][net.name]:.1e}",
                )
            )
    return rows


def _fma_peak(threads: int) -> float | str:
    """GFLOP/s of nothing but multiply-adds on ``threads`` threads (:mod:`fma_peak`), measured in this
    run; why not, where the probe cannot run here."""
    import fma_peak

    try:
        return fma_peak.fma_peak_gflops(threads)
    except Exception as error:  # noqa: BLE001 - the rows stand without the peak, saying why
        return f"{type(error).__name__}: {error}"[:200]


def _of_peak(ours: float, peer: float, peak: float | str) -> str:
    """Both rates (FLOP/s) as percentages of the multiply-add peak (GFLOP/s) measured in this run."""
    if isinstance(peak, str):
        return f"; no multiply-add peak measured ({peak})"
    return (f"; ours {100 * ours / 1e9 / peak:.0f}%, onnxruntime {100 * peer / 1e9 / peak:.0f}% of the "
            f"{peak:.0f} GFLOP/s multiply-add peak of {ORT_THREADS} threads measured in this run")


CONVERTED_MODELS = ("resnet50", "mobilenet_v2")


def _converter_python() -> str:
    """The Python that runs ``nnef_tools.convert`` (``UOPVIZ_NNEF_TOOLS_PYTHON``, default this one)."""
    return os.environ.get("UOPVIZ_NNEF_TOOLS_PYTHON", sys.executable)


def converter_missing() -> str | None:
    """Why the converter cannot run here, or None when it can."""
    python = _converter_python()
    try:
        found = subprocess.run([python, "-c", "import nnef_tools.convert"], capture_output=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"cannot run {python}: {error}"
    if found.returncode != 0:
        return (
            f"nnef-tools is not installed for {python} (pip install nnef-tools onnx in a scratch venv "
            "and set UOPVIZ_NNEF_TOOLS_PYTHON to its python)"
        )
    return None


def convert_onnx(onnx_file: Path, folder: Path) -> Path:
    """``onnx_file`` converted to an NNEF 1.0 folder by Khronos' converter (a subprocess)."""
    command = [
        _converter_python(), "-m", "nnef_tools.convert", "--input-format", "onnx", "--output-format", "nnef",
        "--input-model", str(onnx_file), "--output-model", str(folder),
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if result.returncode != 0 or not (folder / "graph.nnef").is_file():
        raise RuntimeError(f"nnef_tools.convert failed on {onnx_file}:\n{result.stderr.strip()[-2000:]}")
    return folder


def _timed_folder(folder: Path, x: Any, backend: str) -> dict:
    """Load and compile one NNEF folder and run it once on input ``x`` (the converter names the
    input after the ONNX graph's, ``external1``: the graph's only input): the times, the output
    (for the error) and ``call``, one inference (timed by :func:`_interleaved`)."""
    import uopviz as uv

    started = time.perf_counter()
    graph = uv.nnef.load(folder)
    loaded = time.perf_counter()
    program = graph.compile(backend, opts=OPTS)
    compiled = time.perf_counter()
    inputs = {graph.inputs[0]: x}
    out = graph.run(inputs, backend=backend, opts=OPTS)[graph.outputs[0]]
    return {"load_s": loaded - started, "compile_s": compiled - loaded, "kernels": len(program.kernels),
            "operations": len(graph.operations), "output": out,
            "call": lambda: graph.run(inputs, backend=backend, opts=OPTS)}  # fmt: skip


#: rounds of the converted child (ours, both folders in turn) and of ONNX Runtime, in blocks
INTERLEAVED_ROUNDS = 16
INTERLEAVED_BLOCKS = 4
#: seconds left between ONNX Runtime's block and ours: its threads spin after a call and would take
#: the cores from our next kernels (MobileNet-v2: 3-4x slower right after it)
PEER_SETTLE_S = 0.2


def _interleaved(calls: dict[str, Any], rounds: int = 16, warmup: int = 2) -> dict[str, list[float]]:
    """Each call timed once per round, the calls in turn within a round, the order rotated from
    round to round (a busy host slows them alike; none always follows the same one): the seconds
    of each round after ``warmup`` untimed ones."""
    import gc

    names = list(calls)
    samples: dict[str, list[float]] = {name: [] for name in names}
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for index in range(warmup + rounds):
            for name in names[index % len(names) :] + names[: index % len(names)]:
                started = time.perf_counter()
                calls[name]()
                if index >= warmup:
                    samples[name].append(time.perf_counter() - started)
    finally:
        if gc_was_enabled:
            gc.enable()
    return samples


def _in_blocks(ours: dict[str, Any], peer: Any) -> dict[str, tuple[float, float]]:
    """``(median, best)`` seconds of each of ``ours`` and of ``peer`` (``"peer"``), over
    :data:`INTERLEAVED_ROUNDS` rounds each, in :data:`INTERLEAVED_BLOCKS` alternating blocks of
    consecutive calls of one of them (:func:`_interleaved`): a host whose speed drifts over seconds
    slows every side alike, where all of ours and then all of the peer's did not (ONNX Runtime's own
    time moved 1.3-1.6x between children).  Each side is timed the same way, on its own weights
    warm from its previous call (MobileNet-v2 on LLVM, one run each way: our two folders in turn,
    evicting each other's weights, 1.38x ORT's time; a block of each 1.17-1.25x).  The peer goes
    after ours in each block, with :data:`PEER_SETTLE_S` after it for its spinning threads to stop.
    Our sides take turns at going first in a block, the one that follows that pause (the converted
    SqueezeNet-1.1 on LLVM, always first: 1.21-1.39x ORT's time against our folder's 1.15-1.21x of
    the same kernels in the same child; in one process, the two folders' kernels in turn ran
    3.30 / 3.30 ms, median of 35)."""
    import statistics

    rounds = INTERLEAVED_ROUNDS // INTERLEAVED_BLOCKS
    samples: dict[str, list[float]] = {name: [] for name in [*ours, "peer"]}
    for block in range(INTERLEAVED_BLOCKS):
        warmup = 2 if block == 0 else 0
        # each folder in a block of its own, as the peer: a model's weights stay in the caches from
        # one call to the next for each side alike (two folders in turn evicted each other's)
        turn = list(ours.items()) if block % 2 == 0 else list(ours.items())[::-1]
        for name, call in turn:
            samples[name] += _interleaved({name: call}, rounds, warmup)[name]
        samples["peer"] += _interleaved({"peer": peer}, rounds, warmup)["peer"]
        time.sleep(PEER_SETTLE_S)
    return {name: (statistics.median(times), min(times)) for name, times in samples.items()}


def _model_folder(model: str, form: str, root: Path, net: Any) -> Path:
    """The NNEF 1.0 folder of ``net`` in ``form``: ``zoo`` (written by ``zoo.write_nnef1``) or
    ``converted`` (its ONNX form converted by nnef-tools)."""
    import onnx
    import zoo
    import zoo_onnx

    if form == "zoo":
        return zoo.write_nnef1(net, root / "zoo")
    onnx_file = root / f"{model}.onnx"
    onnx.save(zoo_onnx.onnx_model(net), str(onnx_file))
    return convert_onnx(onnx_file, root / f"{model}.nnef")


def _converted_child(model: str, backend: str) -> dict:
    """Runs in a child: the converter's NNEF folder of ``model``, our own folder, and ONNX Runtime on
    the ONNX file the converter read (compile cold: the converted folder first, so our folder's
    kernels are not in the cache yet), then the two folders' inferences timed in turn, round by
    round, and ONNX Runtime's after them."""
    import numpy as np
    import onnxruntime
    import zoo

    net = zoo.BUILDERS[model]()
    x = net.input_data()
    inputs = {net.input_name: x}
    expected = zoo.reference(net, x)
    with tempfile.TemporaryDirectory(prefix="uopviz-zoo-converted-") as root:
        converted = _timed_folder(_model_folder(model, "converted", Path(root), net), x, backend)
        ours = _timed_folder(_model_folder(model, "zoo", Path(root), net), x, backend)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = ORT_THREADS, 1
        onnx_file = str(Path(root) / f"{model}.onnx")
        session = onnxruntime.InferenceSession(onnx_file, options, providers=["CPUExecutionProvider"])
    # ONNX Runtime's threads keep spinning after a call and take the cores from the next call's
    # kernels: it is timed in blocks of its own, after the two folders' blocks timed in turn
    times = _in_blocks({"converted": converted.pop("call"), "zoo": ours.pop("call")},
                       lambda: session.run(None, inputs))  # fmt: skip
    for name, found in (("converted", converted), ("zoo", ours)):
        found["error"] = float(np.abs(found.pop("output") - expected).max())
        found["relative_error"] = found["error"] / float(np.abs(expected).max())
        found["inference_s"], found["best_s"] = times[name]
    return {"converted": converted, "zoo": ours, "peer_s": times["peer"][0], "peer_best_s": times["peer"][1],
            "onnxruntime": onnxruntime.__version__}  # fmt: skip


def _converted_rows(backends: list[str], timeout: float) -> list[dict]:
    """The converter's NNEF folders beside ours, against ONNX Runtime on the same ONNX file."""
    from run import row

    models = [m for m in os.environ.get("UOPVIZ_ZOO_CONVERTED", ",".join(CONVERTED_MODELS)).split(",") if m]
    missing = converter_missing()
    if missing is not None:
        return [{"case": f"{model} converted by nnef-tools", "status": "skipped", "notes": missing}
                for model in models]  # fmt: skip
    rows = []
    for backend in backends:
        for model in models:
            case = f"{model} NNEF 1.0 converted by nnef-tools from ONNX ({backend})"
            try:
                m = _measure_in_child(model, backend, timeout, ("converted",))
            except Exception as error:  # noqa: BLE001 - one model's failure is its own row
                rows.append({"case": case, "status": "error", "notes": f"{type(error).__name__}: {error}"})
                continue
            converted, ours = m["converted"], m["zoo"]
            rows.append(
                row(
                    f"{case}: inference",
                    converted["inference_s"],
                    peer=f"onnxruntime {m['onnxruntime']} CPU ({ORT_THREADS} threads), same ONNX file",
                    peer_s=m["peer_s"],
                    notes=f"batch 1; our own folder of it {ours['inference_s'] * 1e3:.1f} ms "
                    f"(converted / ours {converted['inference_s'] / ours['inference_s']:.2f}x, best "
                    f"{converted['best_s'] * 1e3:.1f} / {ours['best_s'] * 1e3:.1f} ms; in turn, round by "
                    f"round); kernels {converted['kernels']} converted, {ours['kernels']} ours; load + "
                    f"compile {converted['load_s'] + converted['compile_s']:.1f} s cold; max error vs "
                    f"numpy {converted['error']:.1e} (relative {converted['relative_error']:.1e})",
                )
            )
    return rows


def _batches(models: list[str]) -> list[tuple[str, int]]:
    """The (model, batch) pairs to measure: every model at batch 1, and at each other batch of
    ``UOPVIZ_ZOO_BATCH`` (default ``1,8``) the models of ``UOPVIZ_ZOO_BATCHED`` (default
    ``resnet50,mobilenet_v2``) that are measured at all."""
    batches = [int(b) for b in os.environ.get("UOPVIZ_ZOO_BATCH", "1,8").split(",") if b]
    batched = [m for m in os.environ.get("UOPVIZ_ZOO_BATCHED", ",".join(BATCHED_MODELS)).split(",") if m]
    pairs = [(model, 1) for model in models if 1 in batches]
    for batch in (b for b in batches if b != 1):
        pairs += [(model, batch) for model in models if model in batched]
    return pairs


#: the models also measured at the batches other than 1 (UOPVIZ_ZOO_BATCHED)
BATCHED_MODELS = ("resnet50", "mobilenet_v2")


def _warm_rows(case: str, m: dict) -> list[dict]:
    """Load + compile again in a new process with the cache the cold child filled (batch 1 only)."""
    from run import row

    if "warm_load_s" not in m:
        return []
    return [
        row(
            f"{case}: load + compile, warm",
            m["warm_load_s"] + m["warm_compile_s"],
            notes=f"load {m['warm_load_s']:.2f} s, compile {m['warm_compile_s']:.2f} s in a new "
            "process opening the same folder: the composed graph, the program and every kernel "
            "in the persistent caches",
        )
    ]


def _model_rows(case: str, m: dict, batch: int) -> list[dict]:
    """The rows of one model measured in a child: load + compile, inference, and the time by kind."""
    import zoo_breakdown
    from run import row

    peer = f"onnxruntime {m['onnxruntime']} CPU ({ORT_THREADS} threads)"
    return [
        row(
            f"{case}: load + compile, cold",
            m["load_s"] + m["compile_s"],
            notes=f"load {m['load_s']:.2f} s, compile {m['compile_s']:.2f} s (opts {OPTS}); "
            f"{m['operations']} operations -> {m['kernels']} kernels, {m['compiled']} compiled; empty cache",
        ),
        *_warm_rows(case, m),
        row(
            f"{case}: inference",
            m["inference_s"],
            peer=peer,
            peer_s=m["peer_s"],
            notes=f"batch {batch}; first run {m['first_run_s']:.3f} s; max error vs numpy "
            f"{m['error']:.2e} (relative {m['relative_error']:.2e})",
        ),
        row(
            f"{case}: time by kind",
            sum(m["by_kind"].values()),
            peer=f"{peer}, its profile",
            peer_s=sum(m["peer_by_kind"].values()),
            notes="each kernel alone vs onnxruntime's node times: "
            + zoo_breakdown.format_breakdown(m["by_kind"], m["peer_by_kind"])
            + _worst_pairs_note(m.get("conv_pairs", [])),
        ),
    ]


def _worst_pairs_note(pairs: list) -> str:
    """The convolutions we lose most time on against onnxruntime's nodes, as a note's tail ('' where
    the two do not pair: :func:`zoo_breakdown.paired_convolutions`)."""
    import zoo_breakdown

    worst = zoo_breakdown.format_worst_pairs([tuple(pair) for pair in pairs])
    return f"; convolutions paired in order, most behind: {worst}" if worst else ""


def run() -> list[dict]:
    """Per model, batch and backend: a row for load + compile, one for inference (ONNX Runtime as
    the peer) and one for the time by kind (a model that fails becomes an error row of its own);
    the one-operation graph, the single convolutions and the converter's folders."""
    models = [m for m in os.environ.get("UOPVIZ_ZOO_MODELS", ",".join(MODELS)).split(",") if m]
    backends = [b for b in os.environ.get("UOPVIZ_ZOO_BACKENDS", ",".join(BACKENDS)).split(",") if b]
    timeout = float(os.environ.get("UOPVIZ_ZOO_TIMEOUT", "600"))
    import uopviz as uv

    backends = [backend for backend in backends if backend in uv.backends.available()]
    rows = _one_operation_rows(backends) + _conv_rows(backends, timeout) + _converted_rows(backends, timeout)
    for backend in backends:
        for model, batch in _batches(models):
            case = (
                f"{model} NNEF 1.0 ({backend})"
                if batch == 1
                else f"{model} NNEF 1.0 batch {batch} ({backend})"
            )
            try:
                m = _measure_in_child(model, backend, timeout, extra=(str(batch),), warm=batch == 1)
            except Exception as error:  # noqa: BLE001 - one model's failure is its own row
                rows.append({"case": f"{case}: load + compile, cold", "status": "error",
                             "notes": f"{type(error).__name__}: {error}"})  # fmt: skip
                continue
            rows += _model_rows(case, m, batch)
    return rows


def _kernels_child(model: str, backend: str, form: str = "zoo", repeat: int = 5) -> dict:
    """Each kernel of ``model``'s program (its folder in ``form``: ``zoo`` or ``converted``, see
    :func:`_model_folder`) timed alone, bound to its arrays (no allocation), median of ``repeat``
    runs of the whole program; slowest first."""
    import statistics

    import zoo
    from run import measure

    import uopviz as uv
    from uopviz.nnef.program.runtime import program_inputs

    net = zoo.BUILDERS[model]()
    with tempfile.TemporaryDirectory(prefix="uopviz-zoo-") as root:
        graph = uv.nnef.load(_model_folder(model, form, Path(root), net))
    inputs = {graph.inputs[0]: net.input_data()}
    program = graph.compile(backend, opts=OPTS)
    run_s = measure(lambda: graph.run(inputs, backend=backend, opts=OPTS), repeat=5, warmup=1, min_time_s=0.0)
    steps = [step for kind, step in program.nnef_steps if kind == "kernels"]
    times: list[tuple[str, list[float]]] = []
    for step in steps:
        bound = step.bind(program_inputs(graph, step, inputs))
        launches = [(item.kernel.name, launch, []) for item, launch in zip(step.items, bound.launches)]
        for _ in range(repeat + 1):  # the first round warms the caches
            for _, launch, seconds in launches:
                seconds.append(launch.run())
        times += [(name, seconds[1:]) for name, _, seconds in launches]
    kernels = sorted(((name, statistics.median(seconds)) for name, seconds in times), key=lambda p: -p[1])
    return {"run_s": run_s, "kernels_s": sum(seconds for _, seconds in kernels), "kernels": kernels}


if __name__ == "__main__":
    sys.path.insert(0, str(BENCH_DIR))
    if sys.argv[1] == "conv":
        print(json.dumps(_conv_child(sys.argv[2])))
    elif sys.argv[1] == "converted":
        print(json.dumps(_converted_child(sys.argv[2], sys.argv[3])))
    elif sys.argv[1] == "warm":
        print(json.dumps(_warm_child(sys.argv[2], sys.argv[3])))
    elif sys.argv[1] == "kernels":
        print(json.dumps(_kernels_child(*sys.argv[2:5])))
    else:
        print(json.dumps(_child(sys.argv[1], sys.argv[2], *map(int, sys.argv[3:4]))))
