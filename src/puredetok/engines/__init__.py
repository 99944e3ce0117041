"""Engine plugins: puredetok inside the engines' own serving code, through their plugin entry points."""
