"""One module per corpus program; the harness finds them by name (tf_*, kio_*, ext_*)."""
