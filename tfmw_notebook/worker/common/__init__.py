"""What every room uses: guarded patches, import hooks, versions, identity, the strategy."""
