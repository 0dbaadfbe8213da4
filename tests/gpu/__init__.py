"""GPU tests (marked gpu): run on the device machine, skipped in CI."""
