"""NNEF 1.0 (the classic ``graph.nnef`` + ``.dat`` folder): :mod:`.loader` reads a model through the
``nnef`` package's parser (run in a child process, :mod:`.process`) and translates it to SkriptND
(:mod:`.translation`, :mod:`.operations`, :mod:`.compound`), which composes as any other model."""
