"""The values of SkriptND expressions and their evaluation: what composition uses to bind
attributes and shapes, and lowering uses to read the ``@lower`` formulas.

- :mod:`.values`: the values besides plain Python ones (run-time extents and scalars, guarded
  indices, undecided values) and the helpers on values;
- :mod:`.scalar_ops`: the operators and functions on scalars, elementwise over packs, and folds;
- :mod:`.expressions`: the :class:`~.expressions.Evaluator` that walks an expression's tree.
"""
