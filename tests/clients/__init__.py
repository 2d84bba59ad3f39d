"""Cross-language client tests (a package, so its conftest does not take the top-level name)."""
