"""A factory module that fails while it is imported, for ``add_from_factory`` tests."""

raise RuntimeError("this module needs a setting that is not there")
