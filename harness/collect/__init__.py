"""From run directories to the store: untrusted archives and folders found and parsed (journal and asv
results), ingested into the embedded store, which owns its columns and returns records."""
