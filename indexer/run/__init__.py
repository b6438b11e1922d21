"""`indexer run`'s wing: the daemon's loop over the ports of :mod:`indexer.run.ports`, what
follows a table's source and rebuilds joined documents, the schema watch, continuous
verification, and the one module that names the concrete adapters (:mod:`.wiring`)."""
