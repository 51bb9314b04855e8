"""voicegate's version, from the installed package metadata."""

from importlib.metadata import PackageNotFoundError, version


def package_version() -> str:
    try:
        return version("voicegate")
    except PackageNotFoundError:
        return "0+unknown"
