"""The LLVM IR instructions of one ALU op or conversion, with numpy's semantics (kernel-ir.md):
integer arithmetic wraps, ``IDIV``/``MOD`` are floor division and modulo through small
``alwaysinline`` helpers that never divide by zero, shifts past the width give numpy's 0 / -1, and
float → int conversions go through a range check instead of LLVM's poison.  Each function emits
into the rendering in progress (an :class:`InstructionEmitter`) and returns the result's name.
bfloat16 values are held in floats, rounded to bfloat16 after every op (:func:`round_bfloat16`)."""

from __future__ import annotations

from typing import Protocol

from uopviz.backends.base import RenderError
from uopviz.backends.llvm_types import float_literal, mangle, scalar_type, splat, value_type, with_element
from uopviz.core.dtype import DType, dtypes
from uopviz.core.ops import Ops
from uopviz.core.uop import UOp


class InstructionEmitter(Protocol):
    """What the instructions here need of the rendering in progress
    (:class:`~uopviz.backends.llvm_renderer.LLVMRenderState`)."""

    #: the module's helper functions by name, each emitted once
    helpers: dict[str, str]

    def temp(self, prefix: str, instruction: str) -> str:
        """Emit ``%name = instruction`` with a fresh name and return the name."""

    def intrinsic(self, base: str, result: str, arguments: list[str], overloads: list[str]) -> str:
        """Declare ``llvm.<base>`` for these overloads and return its name."""

    def fail(self, u: UOp, problem: str) -> RenderError:
        """The error that ``u`` cannot be rendered, and why."""


_INT_COMPARE = {
    Ops.CMP_LT: ("slt", "ult"),
    Ops.CMP_GT: ("sgt", "ugt"),
    Ops.CMP_GE: ("sge", "uge"),
    Ops.CMP_LE: ("sle", "ule"),
    Ops.CMP_NE: ("ne", "ne"),
    Ops.CMP_EQ: ("eq", "eq"),
}
_FLOAT_COMPARE = {
    Ops.CMP_LT: "olt",
    Ops.CMP_GT: "ogt",
    Ops.CMP_GE: "oge",
    Ops.CMP_LE: "ole",
    Ops.CMP_NE: "une",
    Ops.CMP_EQ: "oeq",
}
_FLOAT_INTRINSICS = {Ops.SQRT: "sqrt", Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin", Ops.TRUNC: "trunc"}


def _signed(dtype: DType) -> bool:
    return dtype.kind.value in ("signed", "index")


def alu_instruction(
    state: InstructionEmitter, op: Ops, scalar: DType, vtype: str, args: list[str], u: UOp
) -> str:
    """Emit the instructions of one ALU op on values of ``vtype`` and return the result's name."""
    a = args[0]
    b = args[1] if len(args) > 1 else ""
    is_float, is_bool = scalar.is_float, scalar.is_bool
    fast = "contract " if is_float else ""
    if is_bool and op in (Ops.ADD, Ops.MAX, Ops.OR):
        return state.temp("alu", f"or {vtype} {a}, {b}")
    if is_bool and op in (Ops.MUL, Ops.AND):
        return state.temp("alu", f"and {vtype} {a}, {b}")
    simple = {Ops.ADD: ("add", "fadd"), Ops.SUB: ("sub", "fsub"), Ops.MUL: ("mul", "fmul")}
    if op in simple:
        instruction = simple[op][1 if is_float else 0]
        return state.temp("alu", f"{instruction} {fast}{vtype} {a}, {b}")
    if op is Ops.DIV:
        return state.temp("alu", f"fdiv {vtype} {a}, {b}")
    if op in (Ops.XOR, Ops.OR, Ops.AND):
        return state.temp("alu", f"{op.name.lower()} {vtype} {a}, {b}")
    if op is Ops.NEG:
        if is_float:
            return state.temp("alu", f"fneg {vtype} {a}")
        return a if is_bool else state.temp("alu", f"sub {vtype} {splat('0', vtype)}, {a}")
    if op is Ops.NOT:
        return state.temp("alu", f"xor {vtype} {a}, {splat('true' if is_bool else '-1', vtype)}")
    if op is Ops.RECIP:
        one = splat(float_literal(1.0, scalar_type(scalar)), vtype)
        return state.temp("alu", f"fdiv {vtype} {one}, {a}")
    if op in _INT_COMPARE or op in _FLOAT_COMPARE:
        if is_float:
            return state.temp("alu", f"fcmp {_FLOAT_COMPARE[op]} {vtype} {a}, {b}")
        signed, unsigned = _INT_COMPARE[op]
        return state.temp("alu", f"icmp {signed if _signed(scalar) else unsigned} {vtype} {a}, {b}")
    if op is Ops.MAX:
        if is_float:  # a where a is NaN or greater, else b: NaN wins, as C's helper and numpy
            condition = with_element(vtype, "i1")
            unordered = state.temp("alu", f"fcmp uno {vtype} {a}, {a}")
            greater = state.temp("alu", f"fcmp ogt {vtype} {a}, {b}")
            either = state.temp("alu", f"or {condition} {unordered}, {greater}")
            return state.temp("alu", f"select {condition} {either}, {vtype} {a}, {vtype} {b}")
        function = state.intrinsic("smax" if _signed(scalar) else "umax", vtype, [vtype, vtype], [vtype])
        return state.temp("alu", f"call {vtype} {function}({vtype} {a}, {vtype} {b})")
    if op is Ops.WHERE:
        condition = value_type(u.src[0].dtype)
        return state.temp("alu", f"select {condition} {a}, {vtype} {b}, {vtype} {args[2]}")
    if op is Ops.MULACC:
        if is_float:
            function = state.intrinsic("fmuladd", vtype, [vtype] * 3, [vtype])
            return state.temp("alu", f"call {vtype} {function}({vtype} {a}, {vtype} {b}, {vtype} {args[2]})")
        product = state.temp("alu", f"mul {vtype} {a}, {b}")
        return state.temp("alu", f"add {vtype} {product}, {args[2]}")
    if op in (Ops.IDIV, Ops.MOD):
        if scalar is dtypes.index and u.src[0].vmin >= 0 and u.src[1].vmin > 0:
            return state.temp("alu", f"{'sdiv' if op is Ops.IDIV else 'srem'} {vtype} {a}, {b}")
        helper = division_helper(state, op, scalar, vtype)
        return state.temp("alu", f"call {vtype} {helper}({vtype} {a}, {vtype} {b})")
    if op in (Ops.SHL, Ops.SHR):
        if scalar is dtypes.index:
            return state.temp("alu", f"{'shl' if op is Ops.SHL else 'ashr'} {vtype} {a}, {b}")
        helper = shift_helper(state, op, scalar, vtype)
        return state.temp("alu", f"call {vtype} {helper}({vtype} {a}, {vtype} {b})")
    if op in _FLOAT_INTRINSICS or op is Ops.POW:
        if not is_float:
            raise state.fail(u, f"{op.name} of {scalar.name}")
        name = "pow" if op is Ops.POW else _FLOAT_INTRINSICS[op]
        function = state.intrinsic(name, vtype, [vtype] * len(args), [vtype])
        return state.temp("alu", f"call {vtype} {function}({', '.join(f'{vtype} {x}' for x in args)})")
    raise state.fail(u, f"cannot render {op.name} (Instruction Selection should have decomposed it)")


def _helper_name(kind: str, vtype: str) -> str:
    return f"@{kind}.{mangle(vtype)}"


def division_helper(state: InstructionEmitter, op: Ops, scalar: DType, vtype: str) -> str:
    """``@idiv.<type>`` / ``@mod.<type>``: floor division and modulo, 0 for a zero divisor, no UB."""
    kind = "idiv" if op is Ops.IDIV else "mod"
    name = _helper_name(kind if _signed(scalar) else kind + "u", vtype)  # signed and unsigned differ
    if name in state.helpers:
        return name
    zero, one, minus = splat("0", vtype), splat("1", vtype), splat("-1", vtype)
    bool_type = with_element(vtype, "i1")
    if not _signed(scalar):
        body = [
            f"  %zero = icmp eq {vtype} %b, {zero}",
            f"  %safe = select {bool_type} %zero, {vtype} {one}, {vtype} %b",
            f"  %r = {'udiv' if op is Ops.IDIV else 'urem'} {vtype} %a, %safe",
            f"  %out = select {bool_type} %zero, {vtype} {zero}, {vtype} %r",
        ]
    else:
        body = [
            f"  %zero = icmp eq {vtype} %b, {zero}",
            f"  %minus = icmp eq {vtype} %b, {minus}",
            f"  %bad = or {bool_type} %zero, %minus",
            f"  %safe = select {bool_type} %bad, {vtype} {one}, {vtype} %b",
            f"  %q = sdiv {vtype} %a, %safe",
            f"  %r = srem {vtype} %a, %safe",
            f"  %r_nonzero = icmp ne {vtype} %r, {zero}",
            f"  %a_sign = icmp slt {vtype} %a, {zero}",
            f"  %b_sign = icmp slt {vtype} %b, {zero}",
            f"  %signs = xor {bool_type} %a_sign, %b_sign",
            f"  %adjust = and {bool_type} %r_nonzero, %signs",
        ]
        if op is Ops.IDIV:
            body += [
                f"  %q_minus = sub {vtype} %q, {one}",
                f"  %floor = select {bool_type} %adjust, {vtype} %q_minus, {vtype} %q",
                f"  %negated = sub {vtype} {zero}, %a",
                f"  %by_minus = select {bool_type} %minus, {vtype} %negated, {vtype} %floor",
                f"  %out = select {bool_type} %zero, {vtype} {zero}, {vtype} %by_minus",
            ]
        else:
            body += [
                f"  %r_plus = add {vtype} %r, %b",
                f"  %floor = select {bool_type} %adjust, {vtype} %r_plus, {vtype} %r",
                f"  %out = select {bool_type} %bad, {vtype} {zero}, {vtype} %floor",
            ]
    state.helpers[name] = "\n".join(
        [
            f"define internal {vtype} {name}({vtype} %a, {vtype} %b) alwaysinline {{",
            *body,
            f"  ret {vtype} %out",
            "}",
            "",
        ]
    )
    return name


def shift_helper(state: InstructionEmitter, op: Ops, scalar: DType, vtype: str) -> str:
    """``@shl.<type>`` / ``@shr.<type>``: counts outside [0, bits) give 0 (or -1 for SHR of negatives)."""
    # signed and unsigned SHR differ (ashr / lshr) on the same LLVM type: one helper each
    kind = "shl" if op is Ops.SHL else "shr" if _signed(scalar) else "shru"
    name = _helper_name(kind, vtype)
    if name in state.helpers:
        return name
    bits = scalar.bits
    bool_type = with_element(vtype, "i1")
    zero = splat("0", vtype)
    body = [
        f"  %fits = icmp ult {vtype} %b, {splat(str(bits), vtype)}",
        f"  %count = select {bool_type} %fits, {vtype} %b, {vtype} {zero}",
    ]
    if op is Ops.SHL:
        body += [
            f"  %shifted = shl {vtype} %a, %count",
            f"  %out = select {bool_type} %fits, {vtype} %shifted, {vtype} {zero}",
        ]
    elif _signed(scalar):
        body += [
            f"  %shifted = ashr {vtype} %a, %count",
            f"  %sign = ashr {vtype} %a, {splat(str(bits - 1), vtype)}",
            f"  %out = select {bool_type} %fits, {vtype} %shifted, {vtype} %sign",
        ]
    else:
        body += [
            f"  %shifted = lshr {vtype} %a, %count",
            f"  %out = select {bool_type} %fits, {vtype} %shifted, {vtype} {zero}",
        ]
    state.helpers[name] = "\n".join(
        [
            f"define internal {vtype} {name}({vtype} %a, {vtype} %b) alwaysinline {{",
            *body,
            f"  ret {vtype} %out",
            "}",
            "",
        ]
    )
    return name


def float_to_int_helper(state: InstructionEmitter, source: DType, target: DType, count: int) -> str:
    """``@float_to_<int>``: truncation with the C backend's rule for values that do not fit."""
    source_type = value_type(source.vec(count) if count > 1 else source)
    target_type = value_type(target.vec(count) if count > 1 else target)
    name = f"@float_to_{target.name}.{mangle(source_type)}"
    if name in state.helpers:
        return name
    double = with_element(source_type, "double")
    i32, i64, flag = (
        with_element(source_type, "i32"),
        with_element(source_type, "i64"),
        with_element(source_type, "i1"),
    )
    widen = (
        f"  %d = fpext {source_type} %x to {double}"
        if scalar_type(source) != "double"
        else f"  %d = fadd {double} %x, {splat(float_literal(-0.0, 'double'), double)}"
    )

    def literal(value: float) -> str:
        return splat(float_literal(value, "double"), double)

    if target.itemsize <= 4 and target is not dtypes.uint32:
        body = [
            widen,
            f"  %above = fcmp ogt {double} %d, {literal(-2147483649.0)}",
            f"  %below = fcmp olt {double} %d, {literal(2147483648.0)}",
            f"  %fits = and {flag} %above, %below",
            f"  %i = fptosi {double} %d to {i32}",
            f"  %wide = select {flag} %fits, {i32} %i, {i32} {splat('-2147483648', i32)}",
        ]
        body.append(
            f"  %out = trunc {i32} %wide to {target_type}"
            if target.itemsize < 4
            else f"  %out = add {i32} %wide, {splat('0', i32)}"
        )
    else:
        body = [
            widen,
            f"  %above = fcmp oge {double} %d, {literal(-9223372036854775808.0)}",
            f"  %below = fcmp olt {double} %d, {literal(9223372036854775808.0)}",
            f"  %fits = and {flag} %above, %below",
            f"  %i = fptosi {double} %d to {i64}",
            f"  %wide = select {flag} %fits, {i64} %i, {i64} {splat('-9223372036854775808', i64)}",
        ]
        if target is dtypes.uint64:
            body += [
                f"  %high = fcmp oge {double} %d, {literal(9223372036854775808.0)}",
                f"  %top = fcmp olt {double} %d, {literal(18446744073709551616.0)}",
                f"  %unsigned_fits = and {flag} %high, %top",
                f"  %u = fptoui {double} %d to {i64}",
                f"  %out = select {flag} %unsigned_fits, {i64} %u, {i64} %wide",
            ]
        elif target.itemsize == 4:
            body.append(f"  %out = trunc {i64} %wide to {target_type}")
        else:
            body.append(f"  %out = add {i64} %wide, {splat('0', i64)}")
    state.helpers[name] = "\n".join(
        [
            f"define internal {target_type} {name}({source_type} %x) alwaysinline {{",
            *body,
            f"  ret {target_type} %out",
            "}",
            "",
        ]
    )
    return name


def cast_value(state: InstructionEmitter, value: str, source: DType, target: DType) -> str:
    """Emit a conversion with numpy's semantics; returns the converted value's name."""
    count = max(source.count, target.count)
    s, t = source.scalar, target.scalar
    stype = value_type(s.vec(count) if count > 1 else s)
    ttype = value_type(t.vec(count) if count > 1 else t)
    if s == t or (stype == ttype and not (s.is_float and t is dtypes.bfloat16)):
        return value
    if t.is_bool:
        if s.is_float:
            return state.temp(
                "cast", f"fcmp une {stype} {value}, {splat(float_literal(0.0, scalar_type(s)), stype)}"
            )
        return state.temp("cast", f"icmp ne {stype} {value}, {splat('0', stype)}")
    if s.is_bool:
        return state.temp("cast", f"{'uitofp' if t.is_float else 'zext'} {stype} {value} to {ttype}")
    if t is dtypes.bfloat16:
        as_float = (
            value
            if stype == with_element(stype, "float")
            else cast_value(state, value, source, dtypes.float32.vec(count) if count > 1 else dtypes.float32)
        )
        float_type = with_element(stype, "float")
        return round_bfloat16(state, as_float, float_type)
    if s.is_float and t.is_float:
        widths = {"half": 16, "float": 32, "double": 64}
        instruction = "fpext" if widths[scalar_type(t)] > widths[scalar_type(s)] else "fptrunc"
        return state.temp("cast", f"{instruction} {stype} {value} to {ttype}")
    if s.is_float:
        helper = float_to_int_helper(state, s, t, count)
        return state.temp("cast", f"call {ttype} {helper}({stype} {value})")
    if t.is_float:
        return state.temp("cast", f"{'sitofp' if _signed(s) else 'uitofp'} {stype} {value} to {ttype}")
    if t.bits > s.bits:
        return state.temp("cast", f"{'sext' if _signed(s) else 'zext'} {stype} {value} to {ttype}")
    return state.temp("cast", f"trunc {stype} {value} to {ttype}")


def _bfloat16_rounded(state: InstructionEmitter, value: str, vtype: str) -> tuple[str, str, str]:
    """(float bits rounded to nearest-even at bit 16, the bits, the i32 type) of a float value."""
    itype = with_element(vtype, "i32")
    bits = state.temp("bf", f"bitcast {vtype} {value} to {itype}")
    low = state.temp("bf", f"lshr {itype} {bits}, {splat('16', itype)}")
    odd = state.temp("bf", f"and {itype} {low}, {splat('1', itype)}")
    bias = state.temp("bf", f"add {itype} {odd}, {splat('32767', itype)}")
    return state.temp("bf", f"add {itype} {bits}, {bias}"), bits, itype


def _keep_nan(state: InstructionEmitter, value: str, vtype: str, number: str, nan: str, itype: str) -> str:
    """``number`` where ``value`` is a number, ``nan`` (both of ``itype``) where it is NaN."""
    is_nan = state.temp("bf", f"fcmp uno {vtype} {value}, {value}")
    condition = with_element(vtype, "i1")
    return state.temp("bf", f"select {condition} {is_nan}, {itype} {nan}, {itype} {number}")


def round_bfloat16(state: InstructionEmitter, value: str, vtype: str) -> str:
    """Round a float held value to bfloat16 precision, to nearest-even (bfloat16 arithmetic is
    done in float); NaN stays a (quiet) NaN.  Through the 16 bits: LLVM folds the narrowing."""
    return bfloat16_value(state, bfloat16_bits(state, value, vtype), vtype)


def bfloat16_bits(state: InstructionEmitter, value: str, vtype: str) -> str:
    """The 16 bits (``i16``) of a float held value rounded to bfloat16 (nearest-even; NaN quiet)."""
    rounded, bits, itype = _bfloat16_rounded(state, value, vtype)
    high = state.temp("bf", f"lshr {itype} {rounded}, {splat('16', itype)}")
    quiet = state.temp("bf", f"lshr {itype} {bits}, {splat('16', itype)}")
    quiet = state.temp("bf", f"or {itype} {quiet}, {splat('64', itype)}")
    chosen = _keep_nan(state, value, vtype, high, quiet, itype)
    return state.temp("bf", f"trunc {itype} {chosen} to {with_element(vtype, 'i16')}")


def bfloat16_value(state: InstructionEmitter, bits: str, vtype: str) -> str:
    """The float held value of bfloat16 bits (``i16``): the bits are a float's upper half."""
    itype = with_element(vtype, "i32")
    wide = state.temp("bf", f"zext {with_element(vtype, 'i16')} {bits} to {itype}")
    shifted = state.temp("bf", f"shl {itype} {wide}, {splat('16', itype)}")
    return state.temp("bf", f"bitcast {itype} {shifted} to {vtype}")
