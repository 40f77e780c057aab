"""SkriptND text: tokens (:mod:`.lexer`), the syntax tree (:mod:`.ast`), the parser and the printer
back to canonical text (:mod:`.printer`). The parser is one recursive descent in layers, each class
extending the one below: :mod:`.parser_cursor` (the token cursor), :mod:`.parser_expressions`,
:mod:`.parser_types` (type specs and shapes), :mod:`.parser_components` (``@compose`` components)
and :mod:`.parser` (modules, definitions, blocks; :func:`~.parser.parse_module`). The lowest layer
of :mod:`uopviz.nnef` above its errors: it knows nothing of graphs, values or kernels."""
