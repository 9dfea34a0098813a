"""Windowed bolts: count and time windows, sliding and tumbling, processing or event time."""
from squall.windowing.bolt import StatefulWindowedBolt, Window, WindowedBolt
from squall.windowing.spec import Count, Duration, WindowSpec

__all__ = ["Count", "Duration", "StatefulWindowedBolt", "Window", "WindowSpec", "WindowedBolt"]
