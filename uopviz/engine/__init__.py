"""The engine: what runs the compiler and its output — programs, kernel timing, search and records.

It sits above the front end and the passes and beside the backends' runtimes; ``nnef`` and the
widgets sit above it (``docs/design/architecture.md``).  The layers below reach it only through
the entry points of :mod:`uopviz.core.entry_points`, which ``uopviz/__init__.py`` provides.
"""
