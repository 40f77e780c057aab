"""The SkriptND standard library (uopviz/nnef/stdlib/*.sknd) parses and defines what it must.

The expected operator names per module are listed explicitly from chapter 4 of the NNEF 2.0 draft
(sections 4.1 to 4.7), plus the extra modules `misc`, `rand` and `layer` that real models import.
Besides parsing (and re-parsing the canonical printed text), the tests check facts that the
transcription of the spec text must get right: which operators are bodiless intrinsics, that every
operator invoked by a composition exists in the module it names (and that module is imported),
where cumulative folds (`...`) occur, and the attribute signatures of the operators that models
call most.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from uopviz.nnef.errors import NNEFError
from uopviz.nnef.syntax import ast
from uopviz.nnef.syntax.parser import parse_module
from uopviz.nnef.syntax.printer import print_module

STDLIB = Path(__file__).resolve().parents[2] / "uopviz" / "nnef" / "stdlib"

# Chapter 4 of the spec, in the order of its sections; `axpby` is the name models use for the
# spec's `axpy` (kept as an alias), see the README of the stdlib.
EXPECTED: dict[str, list[str]] = {
    "layout": [  # 4.1
        "tensor", "uniform", "range", "shape",
        "cast", "reshape", "flatten", "unflatten", "squeeze", "unsqueeze",
        "concat", "split", "stack", "unstack",
        "tile", "broadcast", "slice", "pad",
        "transpose", "space_to_batch", "batch_to_space", "space_to_depth", "depth_to_space", "shuffle",
        "nonzero", "gather", "gather_nd", "scatter", "scatter_nd",
    ],
    "math": [  # 4.2
        "iden", "neg", "rcp", "sqr", "sqrt", "rsqr", "rsqrt", "exp", "log", "log2",
        "sin", "cos", "tan", "sinh", "cosh", "tanh", "asin", "acos", "atan", "asinh", "acosh", "atanh",
        "abs", "sign", "not", "floor", "ceil", "round",
        "add", "sub", "mul", "div", "mod", "pow", "min", "max",
        "lt", "gt", "le", "ge", "eq", "ne", "and", "or", "xor",
        "select",
        "sum_n", "prod_n", "min_n", "max_n", "argmin_n", "argmax_n", "any_n", "all_n",
        "axpb", "axpby", "axpy", "clamp",
        "min_reduce", "max_reduce", "sum_reduce", "prod_reduce", "mean_reduce", "lp_reduce",
        "any_reduce", "all_reduce", "argmin", "argmin_nd", "argmax", "argmax_nd", "moments",
        "cumsum",
    ],
    "linalg": ["dot", "matvec", "matmul", "outer"],  # 4.3
    "nn": [  # 4.4
        "linear", "conv", "deconv",
        "max_pool", "sum_pool", "avg_pool", "rms_pool", "lp_pool",
        "relu", "prelu", "thresholded_relu", "elu", "selu", "gelu", "silu", "sigmoid", "softplus", "erf",
        "batch_norm", "mean_variance_norm", "local_response_norm", "l1_norm", "l2_norm", "softmax",
        "lstm_step", "lstm_loop", "_jagged_lstm_loops", "lstm",
    ],
    "image": [  # 4.5
        "nearest_downsample", "nearest_upsample", "area_downsample", "linear_upsample",
        "nearest_resize", "linear_resize", "cubic_resize", "resize", "rescale",
        "max_roi_pool", "avg_roi_pool",
        "_nearest_grid_sample", "_linear_grid_sample", "_cubic_grid_sample", "grid_sample",
    ],
    "quant": ["zero_point_linear_quantize", "min_max_linear_quantize"],  # 4.6
    "algo": ["top_k", "nonmax_suppress"],  # 4.7
    "misc": ["mesh_grid"],
    "rand": ["uniform", "normal", "bernoulli"],
    "layer": ["linear", "conv", "deconv", "batch_norm"],
}  # fmt: skip

EXPECTED_IMPORTS: dict[str, set[str]] = {
    "layout": set(),
    "math": {"layout"},
    "linalg": set(),
    "nn": {"layout", "math"},
    "image": {"math", "nn"},
    "quant": set(),
    "algo": set(),
    "misc": set(),
    "rand": set(),
    "layer": {"math", "nn"},
}

# Operators the spec leaves without a body (intrinsics an implementation provides natively).
INTRINSICS: dict[str, set[str]] = {
    "image": {"cubic_resize", "max_roi_pool", "avg_roi_pool", "_cubic_grid_sample"},
    "algo": {"top_k", "nonmax_suppress"},
    "rand": {"uniform", "normal", "bernoulli"},
}

# The only operators whose text has a cumulative fold (`x + ...`, `x * ...`): everywhere else the
# PDF's `...` was a pack expansion or plain fold `..`.
CUMULATIVE_FOLDS = {
    ("layout", "tensor"), ("layout", "flatten"), ("layout", "unflatten"),
    ("layout", "concat"), ("layout", "split"),
}  # fmt: skip

# Attribute names (in declaration order) of operators that models invoke most.
ATTRIBUTES: dict[tuple[str, str], list[str]] = {
    ("nn", "conv"): ["stride", "dilation", "padding", "padding_align", "ceil_mode", "groups",
                     "data_format", "filter_format"],
    ("nn", "deconv"): ["stride", "dilation", "padding", "padding_align", "output_size", "groups",
                       "data_format", "filter_format"],
    ("nn", "max_pool"): ["axes", "size", "stride", "dilation", "padding", "padding_align", "ceil_mode"],
    ("nn", "avg_pool"): ["axes", "size", "stride", "dilation", "padding", "padding_align",
                         "ignore_border", "ceil_mode"],
    ("nn", "batch_norm"): ["epsilon", "channel_axis"],
    ("nn", "relu"): ["alpha", "max"],
    ("nn", "softmax"): ["axes"],
    ("layout", "reshape"): ["axis", "rank", "shape"],
    ("layout", "transpose"): ["axis", "perm"],
    ("layout", "split"): ["axis", "count", "sizes"],
    ("layout", "pad"): ["axes", "padding", "method"],
    ("math", "add"): ["lhs_align", "rhs_align"],
    ("math", "axpby"): ["x_align", "y_align", "a_align", "b_align"],
    ("math", "axpy"): ["x_align", "y_align", "a_align", "b_align"],
    ("math", "clamp"): ["val_align", "min_align", "max_align"],
    ("math", "cumsum"): ["axis", "exclusive", "reverse"],
    ("quant", "zero_point_linear_quantize"): ["zero_point", "scale", "bits", "signed", "symmetric",
                                              "channel_axis"],
    ("algo", "top_k"): ["k", "axis", "largest", "sorted"],
    ("rand", "uniform"): ["min", "max", "shape"],
    ("rand", "normal"): ["mean", "std", "shape"],
    ("rand", "bernoulli"): ["prob", "shape"],
    ("layer", "linear"): ["channels", "use_bias"],
    ("layer", "conv"): ["channels", "size", "stride", "dilation", "padding", "ceil_mode", "use_bias",
                        "groups"],
    ("layer", "deconv"): ["channels", "size", "stride", "dilation", "padding", "output_size",
                          "use_bias", "groups"],
    ("layer", "batch_norm"): ["epsilon", "use_bias", "use_scale", "momentum"],
}  # fmt: skip

MODULES = sorted(EXPECTED)


@functools.cache
def parsed(module: str) -> ast.Module:
    """The parsed stdlib module (parsed once per test session)."""
    path = STDLIB / f"{module}.sknd"
    return parse_module(path.read_text(encoding="utf-8"), file=str(path))


def definitions(module: str) -> dict[str, ast.Definition]:
    """The operator definitions of a module, by name."""
    return {definition.name: definition for definition in parsed(module).definitions}


def invocations(definition: ast.Definition) -> list[ast.Invocation]:
    """Every operator invocation in the @compose and @update blocks of a definition."""
    found = []
    for component in definition.components + definition.updates:
        found.extend(node for node in ast.walk(component) if isinstance(node, ast.Invocation))
    return found


def test_stdlib_folder_holds_exactly_the_expected_modules() -> None:
    assert sorted(path.stem for path in STDLIB.glob("*.sknd")) == MODULES


@pytest.mark.parametrize("module", MODULES)
def test_module_parses(module: str) -> None:
    try:
        result = parsed(module)
    except NNEFError as error:  # show the located message, not a bare traceback
        pytest.fail(f"stdlib module '{module}' does not parse:\n{error}")
    assert isinstance(result, ast.Module)
    assert result.graphs == (), "imported modules must not define graphs (spec 2.15)"


@pytest.mark.parametrize("module", MODULES)
def test_canonical_text_reparses_to_the_same_tree(module: str) -> None:
    """The stdlib exercises most of the grammar: printing it must lose nothing."""
    text = print_module(parsed(module))
    assert parse_module(text, file=f"{module}.printed.sknd") == parsed(module)


@pytest.mark.parametrize("module", MODULES)
def test_module_defines_the_expected_operators(module: str) -> None:
    names = [definition.name for definition in parsed(module).definitions]
    assert len(names) == len(set(names)), f"duplicate definitions in {module}: {names}"
    missing = [name for name in EXPECTED[module] if name not in names]
    extra = [name for name in names if name not in EXPECTED[module]]
    assert not missing and not extra, f"{module}: missing {missing}, unexpected {extra}"
    assert all(definition.kind == "operator" for definition in parsed(module).definitions)


@pytest.mark.parametrize("module", MODULES)
def test_module_imports(module: str) -> None:
    assert {item.module for item in parsed(module).imports} == EXPECTED_IMPORTS[module]


@pytest.mark.parametrize("module", MODULES)
def test_only_intrinsics_are_bodiless(module: str) -> None:
    bodiless = {
        name
        for name, definition in definitions(module).items()
        if not definition.lowerings and not definition.components
    }
    assert bodiless == INTRINSICS.get(module, set())


@pytest.mark.parametrize("module", MODULES)
def test_every_operator_has_an_output(module: str) -> None:
    without = [name for name, definition in definitions(module).items() if not definition.outputs]
    assert without == []


@pytest.mark.parametrize("module", MODULES)
def test_invoked_operators_exist(module: str) -> None:
    """Each invocation names an operator of this module, or of an imported module (qualified)."""
    imported = {item.module for item in parsed(module).imports}
    problems = []
    for name, definition in definitions(module).items():
        for invocation in invocations(definition):
            target_module, _, target = invocation.name.rpartition(".")
            target_module = target_module or module
            if target_module != module and target_module not in imported:
                problems.append(f"{name}: '{invocation.name}' needs 'import {target_module};'")
            elif target_module not in EXPECTED:
                problems.append(f"{name}: '{invocation.name}' names an unknown module")
            elif target not in definitions(target_module):
                problems.append(f"{name}: '{invocation.name}' is not defined")
    assert problems == []


def test_cumulative_folds_only_where_the_spec_means_them() -> None:
    found = set()
    for module in MODULES:
        for name, definition in definitions(module).items():
            if any(isinstance(node, ast.Fold) and node.cumulative for node in ast.walk(definition)):
                found.add((module, name))
    assert found == CUMULATIVE_FOLDS


@pytest.mark.parametrize(("module", "name"), sorted(ATTRIBUTES))
def test_attribute_signatures(module: str, name: str) -> None:
    definition = definitions(module)[name]
    assert [param.name for param in definition.attribs] == ATTRIBUTES[(module, name)]


def test_linear_accesses_its_one_dimensional_bias_with_a_trailing_comma() -> None:
    """The spec writes `bias[ni]`; a 1-D tensor access needs `bias[ni,]` (spec 2.4)."""
    accesses = [
        node
        for node in ast.walk(definitions("nn")["linear"])
        if isinstance(node, ast.TensorAccess)
        and isinstance(node.base, ast.Identifier)
        and node.base.name == "bias"
    ]
    assert len(accesses) == 1
    assert len(accesses[0].indices) == 1


def test_axpy_is_an_alias_of_axpby() -> None:
    axpy = definitions("math")["axpy"]
    assert not axpy.lowerings
    assert [invocation.name for invocation in invocations(axpy)] == ["axpby"]
    axpby = definitions("math")["axpby"]
    assert (
        [param.name for param in axpy.inputs]
        == [param.name for param in axpby.inputs]
        == ["a", "x", "b", "y"]
    )
    assert len(axpby.lowerings) == 1
    assert len(axpy.asserts) == len(axpby.asserts) == 3


def test_layers_declare_their_variables() -> None:
    variables = {name: [param.name for param in definition.variables]
                 for name, definition in definitions("layer").items()}  # fmt: skip
    assert variables == {
        "linear": ["filter", "bias"],
        "conv": ["filter", "bias"],
        "deconv": ["filter", "bias"],
        "batch_norm": ["running_mean", "running_variance", "bias", "scale"],
    }
    batch_norm = definitions("layer")["batch_norm"]
    assert [result.name for component in batch_norm.updates for result in component.results] == [
        "running_mean",
        "running_variance",
    ]


def test_the_parse_cache_of_another_copy_of_the_library_is_not_reused(tmp_path, monkeypatch):
    # the cached trees carry their files' paths: a second checkout (CI's fresh clone beside a
    # developer's) quoted and located errors in the first one's files, which may differ or be gone
    import shutil

    from uopviz.nnef.composition import stdlib as stdlib_loader

    monkeypatch.setenv("UOPVIZ_CACHE", str(tmp_path / "cache"))
    seen = []
    for copy in ("first", "second"):
        folder = tmp_path / copy / "stdlib"
        shutil.copytree(stdlib_loader.STDLIB_DIR, folder)
        monkeypatch.setattr(stdlib_loader, "STDLIB_DIR", folder)
        monkeypatch.setattr(stdlib_loader, "_stdlib", None)
        conv = stdlib_loader.stdlib_module("nn").definition("conv")
        assert conv.pos.file == str(folder / "nn.sknd")
        seen.append(conv.pos.file)
    assert len(list((tmp_path / "cache").glob("nnef-stdlib-*.pickle"))) == 2 and seen[0] != seen[1]
