"""Qt-free monitor state: polling, snapshots, histories, tiling, traffic log."""
