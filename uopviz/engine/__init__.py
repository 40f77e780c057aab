"""The engine: what runs the compiler and its output — programs, kernel timing, search and records.

It sits above the front end and the passes and beside the backends' runtimes; ``nnef`` and the
widgets sit above it (``docs/design/architecture.md``).  The layers below reach it only through
the entry points of :mod:`uopviz.core.entry_points`, which ``uopviz/__init__.py`` provides.

* ``program.py``: ``uv.compile``, ``compile_kernels`` and ``Program`` (buffers, inputs, running);
* ``kernel.py``: one kernel lowered and timed (``Kernel.lower``, ``Kernel.time``);
* ``search.py``: BEAM search over a kernel's opts (candidates compiled and timed in isolation);
* ``records.py``: tuning records, the opts chosen for each kernel, reused by ``uv.compile``.
"""
