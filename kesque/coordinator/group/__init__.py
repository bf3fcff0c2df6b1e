"""Group coordinator: consumer groups (classic and KIP-848) and their offsets."""
