"""mooncake - kvbatch's drop-in for Mooncake's Python package: only
`mooncake.store` (MooncakeDistributedStore, ReplicateConfig), served by
kvstored. See docs/mooncake.md in kvbatch."""
