"""Speed and memory benchmarks (ratios against timm, measured in one process); not tests."""
