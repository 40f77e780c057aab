"""The rewrites of a graph's list of lowered kernels before they compile: :mod:`.fusion`,
:mod:`.padding`, :mod:`.weight_layout` and :mod:`.loop_merge`."""
