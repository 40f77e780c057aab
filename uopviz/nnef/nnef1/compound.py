"""The compound fragments of the NNEF 1.0 standard library that SkriptND has no operator for,
written out from their 1.0 definitions as elementwise ``math`` operations and poolings:
``softabs``, the L1 and local normalisations, the three quantisations, ``copy_n``, and the ROI
aligns (a resample by the helper module ``nnef1.sknd`` and a pooling); and
:data:`COMPOUND_TRANSLATORS`, the 1.0 operation names they serve."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from uopviz.nnef.errors import NNEFError
from uopviz.nnef.nnef1.operations import emit_pool
from uopviz.nnef.nnef1.translation import Translation, literal


def _math(t: Translation, name: str, *arguments: Any, result: str | None = None) -> str:
    """One elementwise ``math`` operation with 1.0 (left-aligned) broadcasting; the result name."""
    result = result or t.temporary()
    aligns = {1: "", 2: "{lhs_align=0, rhs_align=0}", 3: "{val_align=0, min_align=0, max_align=0}"}
    operands = ", ".join(t.operand(argument) for argument in arguments)
    t.emit(result, f"math.{name}{aligns[len(arguments)]}({operands})")
    return result


def _softabs(t: Translation, op: Any) -> None:
    (x,) = op.inputs.values()
    square = _math(t, "sqr", x)
    shifted = _math(t, "add", square, float(op.attribs["epsilon"]))
    _math(t, "sqrt", shifted, result=t.result(op))


def _l1_norm(t: Translation, op: Any) -> None:
    (x,) = op.inputs.values()
    attribs = op.attribs
    magnitude = _math(t, "abs", x)
    total = t.temporary()
    t.emit(total, f"math.sum_reduce{{axes={literal(list(attribs['axes']))}}}({magnitude})")
    biased = _math(t, "add", total, float(attribs.get("bias", 0.0)))
    capped = _math(t, "max", biased, float(attribs.get("epsilon", 0.0)))
    _math(t, "div", x, capped, result=t.result(op))


def _local_mean(
    t: Translation, source: str, shape: list[int], size: list[int], result: str | None = None
) -> str:
    """``box(source, size, normalize = true)`` with the default 'constant' border and 'same' padding."""
    result = result or t.temporary()
    emit_pool(t, "box", result, source, shape, "avg", size, {})
    return result


def _local_normalization(t: Translation, op: Any) -> None:
    (x,) = op.inputs.values()
    attribs, shape, size = op.attribs, t.shape(x), list(op.attribs["size"])
    source = t.arg(x)
    if op.name in ("local_mean_normalization", "local_contrast_normalization"):
        mean = _local_mean(t, source, shape, size)
        centered = op.name == "local_contrast_normalization"
        source = _math(t, "sub", source, mean, result=None if centered else t.result(op))
        if not centered:
            return
    square = _math(t, "sqr", source)
    sigma = _math(t, "sqrt", _local_mean(t, square, shape, size))
    biased = _math(t, "add", sigma, float(attribs.get("bias", 0.0)))
    capped = _math(t, "max", biased, float(attribs.get("epsilon", 0.0)))
    _math(t, "div", source, capped, result=t.result(op))


def _min_max_quantize(t: Translation, op: Any) -> None:
    """min_max_linear_quantize (and linear_quantize, its unsigned asymmetric case): the value
    rounded to one of ``r + 1`` levels spread over [min, max]; the ``p`` shift of the definition
    cancels out of the round trip."""
    x, low, high = op.inputs.values()
    attribs = op.attribs
    signed = bool(attribs.get("signed", False)) and op.name == "min_max_linear_quantize"
    symmetric = bool(attribs.get("symmetric", False)) and op.name == "min_max_linear_quantize"
    levels = float(2 ** attribs["bits"] - 1 - int(signed and symmetric))
    clamped = _math(t, "clamp", x, low, high)
    extent = _math(t, "sub", high, low)
    scaled = _math(t, "mul", _math(t, "div", _math(t, "sub", clamped, low), extent), levels)
    step = _math(t, "div", _math(t, "round", scaled), levels)
    _math(t, "add", _math(t, "mul", step, extent), low, result=t.result(op))


def _zero_point_quantize(t: Translation, op: Any) -> None:
    x, zero_point, scale = op.inputs.values()
    attribs = op.attribs
    bits, signed, symmetric = attribs["bits"], bool(attribs["signed"]), bool(attribs["symmetric"])
    top = float(2 ** (bits - 1) - 1 if signed else 2**bits - 1)
    bottom = 0.0 if not signed else (-top if symmetric else -top - 1.0)
    if t.is_tensor(zero_point):
        zero = t.temporary()
        t.emit(zero, f"layout.cast<real>({t.arg(zero_point)})")
    else:
        zero = float(zero_point)
    shifted = _math(t, "add", _math(t, "round", _math(t, "div", x, scale)), zero)
    clamped = _math(t, "clamp", shifted, bottom, top)
    _math(t, "mul", _math(t, "sub", clamped, zero), scale, result=t.result(op))


def _logarithmic_quantize(t: Translation, op: Any) -> None:
    x, high = op.inputs.values()
    levels = float(2 ** op.attribs["bits"] - 1)
    top = _math(t, "ceil", _math(t, "log2", high))
    exponent = _math(
        t, "round", _math(t, "clamp", _math(t, "log2", _math(t, "abs", x)), _math(t, "sub", top, levels), top)
    )
    _math(t, "mul", _math(t, "sign", x), _math(t, "pow", 2.0, exponent), result=t.result(op))


def _copy_n(t: Translation, op: Any) -> None:
    (x,) = op.inputs.values()
    for name in next(iter(op.outputs.values())):
        t.emit(t.name(name), f"math.iden({t.arg(x)})")


def _roi_resample(t: Translation, op: Any) -> None:
    x, rois, index = op.inputs.values()
    method = op.attribs.get("method", op.attribs.get("resize_method", "symmetric"))
    if method not in ("symmetric", "asymmetric", "aligned"):
        raise NNEFError(f"NNEF 1.0 operation {t.index} '{op.name}': unknown method '{method}'")
    output_size = list(op.attribs["output_size"])
    if op.name == "roi_resample":
        t.emit_helper(
            t.result(op),
            f"nnef1.roi_resample{{output_size={literal(output_size)}, method='{method}'}}"
            f"({t.arg(x)}, {t.arg(rois)}, {t.arg(index)})",
        )
        return
    rate = list(op.attribs["sampling_rate"])  # the roi_align fragments: resample finer, then pool
    resized = t.temporary()
    sizes = [o * r for o, r in zip(output_size, rate, strict=True)]
    t.emit_helper(
        resized,
        f"nnef1.roi_resample{{output_size={literal(sizes)}, method='{method}'}}"
        f"({t.arg(x)}, {t.arg(rois)}, {t.arg(index)})",
    )
    kind = "avg" if op.name == "avg_roi_align" else "max"
    window = [1, 1] + rate
    padding = [0] * (2 * len(window))
    t.emit(
        t.result(op),
        f"nn.{kind}_pool{{axes={literal(list(range(len(window))))}, size={literal(window)}, "
        f"stride={literal(window)}, padding={literal(padding)}}}({resized})",
    )


#: The translator of each compound 1.0 fragment written out here.
COMPOUND_TRANSLATORS: dict[str, Callable[[Translation, Any], None]] = {
    "softabs": _softabs, "l1_normalization": _l1_norm, "local_mean_normalization": _local_normalization,
    "local_variance_normalization": _local_normalization,
    "local_contrast_normalization": _local_normalization,
    "linear_quantize": _min_max_quantize, "min_max_linear_quantize": _min_max_quantize,
    "zero_point_linear_quantize": _zero_point_quantize, "logarithmic_quantize": _logarithmic_quantize,
    "copy_n": _copy_n, "roi_resample": _roi_resample, "avg_roi_align": _roi_resample,
    "max_roi_align": _roi_resample,
}  # fmt: skip
