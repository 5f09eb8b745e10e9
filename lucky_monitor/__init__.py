"""lucky-monitor: a desktop monitor for LuckyEngine's LRBC shared-memory transport."""

__version__ = "0.1.0"
