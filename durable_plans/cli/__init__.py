"""The `dplan` command line and the client-side API."""
