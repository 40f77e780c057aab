"""Lowering of composed NNEF operations to UOp kernels:

- :mod:`.kernel_math`: scalar math on UOps (element types, promotion, the functions the UOp
  dialect has no op for, accumulations, flat offsets, tidying);
- :mod:`.kernel_builder`: :class:`~.kernel_builder.LoweredKernel`, the PARAM slots of a kernel,
  and the run-time extents and values computed from the counters;
- :mod:`.operation_lowering`: the lowering of ``@lower`` contractions to kernel ASTs, with
  :mod:`.evaluator` reading tensors inside a statement and :mod:`.output_space` solving its left
  side for the output positions;
- :mod:`.intrinsics`: the hand-written kernels of operations with no body; :mod:`.scan`: the
  sequential scans (cumsum) lowered instead of composed.
"""
