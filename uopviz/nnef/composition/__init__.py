"""Composition (chapter 3 of the NNEF 2.0 draft): the standard modules (:mod:`.stdlib`) and the
:class:`~uopviz.nnef.composition.composer.Composer`, which expands a SkriptND graph into a
:class:`~uopviz.nnef.graph.Graph` of leaf operations. Its parts: :mod:`.binding` (arguments to
parameters), :mod:`.shapes` (shape binding), :mod:`.leaves` (leaf operations), :mod:`.loops`
(loops), :mod:`.graph_io` (the graph's own inputs, outputs and variables), :mod:`.support`."""
