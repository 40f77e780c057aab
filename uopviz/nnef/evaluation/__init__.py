"""The values of SkriptND expressions and their evaluation (:mod:`.expressions`): what composition
uses to bind attributes and shapes, and lowering uses to read the ``@lower`` formulas."""
