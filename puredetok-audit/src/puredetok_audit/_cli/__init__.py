"""The ``replay`` and ``audit`` commands (``puredetok`` finds them through entry points)."""
