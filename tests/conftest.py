import os
import sys
from pathlib import Path

os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("DVC_NO_ANALYTICS", "1")
sys.path.insert(0, str(Path(__file__).parent))  # tests/fakes.py importable as `fakes`
