"""A graph's kernels compiled and run: :mod:`.compile` (``compile_graph``, ``GraphProgram``) and
:mod:`.runtime` (``run_graph``: binds the data and runs the programs, loop nodes on the host)."""
