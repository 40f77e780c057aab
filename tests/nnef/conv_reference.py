"""A reference for the convolution tests (test_padding, test_weight_layout): NNEF's conv written
with numpy in float64, independent of uopviz, and the one-conv graph both tests compile."""

from __future__ import annotations

import numpy as np


def conv_reference(x, w, b, stride, dilation, padding, groups):
    """Zero-padded cross-correlation in float64, NCHW / OIHW, ``padding`` = (top, left, bottom, right)."""
    top, left, bottom, right = padding
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (top, bottom), (left, right)])
    n, c, h, width = xp.shape
    o, fc, kh, kw = w.shape
    oh = (h - (kh - 1) * dilation[0] - 1) // stride[0] + 1
    ow = (width - (kw - 1) * dilation[1] - 1) // stride[1] + 1
    out = np.zeros((n, o, oh, ow))
    per_group = o // groups
    for g in range(groups):
        xs = xp[:, g * fc : (g + 1) * fc]
        ws = w[g * per_group : (g + 1) * per_group].astype(np.float64)
        for i in range(kh):
            for j in range(kw):
                y0, x0 = i * dilation[0], j * dilation[1]
                rows = slice(y0, y0 + stride[0] * (oh - 1) + 1, stride[0])
                columns = slice(x0, x0 + stride[1] * (ow - 1) + 1, stride[1])
                patch = xs[:, :, rows, columns]
                term = np.einsum("nchw,oc->nohw", patch, ws[:, :, i, j])
                out[:, g * per_group : (g + 1) * per_group] += term
    return out + b.reshape(1, -1, 1, 1)


def conv_graph(cin, cout, size, kernel, stride, dilation, padding, groups):
    """A one-conv NNEF graph ``y = nn.conv(x, w, b)`` with these attributes, composed."""
    from uopviz.nnef.composition.composer import compose

    top, left, bottom, right = padding
    return compose(
        f"""import nn;
graph Conv {{
    @input {{ x: real[1, {cin}, {size[0]}, {size[1]}]; }}
    @output {{ y: real; }}
    @variable {{ w: real[{cout}, {cin // groups}, {kernel[0]}, {kernel[1]}]; b: real[{cout}]; }}
    @compose {{
        y = nn.conv{{stride=[{stride[0]}, {stride[1]}], dilation=[{dilation[0]}, {dilation[1]}],
                    padding=[{top}, {left}, {bottom}, {right}], groups={groups}}}(x, w, b);
    }}
}}"""
    )
