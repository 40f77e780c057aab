"""Composition (chapter 3 of the NNEF 2.0 draft): the standard modules (:mod:`.stdlib`) and the
:class:`~uopviz.nnef.composition.composer.Composer`, which expands a SkriptND graph into a
:class:`~uopviz.nnef.graph.Graph` of leaf operations. The parts it owns: :mod:`.builder` (the graph
being built), :mod:`.shapes` (shape binding), :mod:`.binding` (arguments to parameters),
:mod:`.leaves` (leaf operations), :mod:`.loops` (loops), :mod:`.graph_io` (the graph's own inputs,
outputs and variables); :mod:`.results` and :mod:`.support` hold what they share."""
