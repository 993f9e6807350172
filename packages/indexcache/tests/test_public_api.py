"""The public namespace is exactly ``__all__``."""

import indexcache


def test_all_is_the_public_namespace():
    public = {n for n in vars(indexcache) if not n.startswith("_")} - {"errors", "cli"}
    assert set(indexcache.__all__) == public


def test_all_names_resolve_and_are_unique():
    assert len(indexcache.__all__) == len(set(indexcache.__all__))
    for name in indexcache.__all__:
        assert getattr(indexcache, name) is not None


def test_errors_are_value_or_runtime_errors():
    assert issubclass(indexcache.ScheduleError, ValueError)
    assert issubclass(indexcache.IncompatibleOptionError, ValueError)
    assert issubclass(indexcache.IndexerInputError, ValueError)
    assert issubclass(indexcache.CarryError, RuntimeError)
    for name in ("ScheduleError", "IncompatibleOptionError", "IndexerInputError", "CarryError"):
        assert issubclass(getattr(indexcache, name), indexcache.IndexCacheError)
