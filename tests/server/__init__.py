"""Server tests (a package, so its conftest does not take the top-level name `conftest`)."""
