"""The public namespace is exactly ``__all__``."""

import glm_config


def test_all_is_the_public_namespace():
    public = {n for n in vars(glm_config) if not n.startswith("_")} - {"errors", "cli"}
    assert set(glm_config.__all__) == public
    assert len(glm_config.__all__) == len(set(glm_config.__all__))


def test_errors_are_value_errors():
    for name in ("ConfigFileError", "NotDsaError", "SettingError"):
        err = getattr(glm_config, name)
        assert issubclass(err, ValueError) and issubclass(err, glm_config.GlmConfigError)
