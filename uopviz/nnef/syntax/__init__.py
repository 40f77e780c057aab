"""SkriptND text: tokens (:mod:`.lexer`), the syntax tree (:mod:`.ast`), the parser (:mod:`.parser`,
with :mod:`.parser_cursor` and :mod:`.parser_expressions`) and the printer back to canonical text
(:mod:`.printer`). The lowest layer of :mod:`uopviz.nnef` above its errors: it knows nothing of
graphs, values or kernels."""
