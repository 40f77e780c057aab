"""The parts of a composed graph: tensors and operations (:mod:`.nodes`) and the rewrites to the
canonical form made after composition (:mod:`.canonical`)."""
