"""The Ray cluster: connecting, its nodes, placing trial bundles, resource preferences."""
