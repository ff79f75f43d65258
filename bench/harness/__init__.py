"""Bolt's GPU benchmark and verification harness (see bench/README.md).

Python stdlib + numpy everywhere; torch is imported only on the GPU path, so the dry run
(`--dry-run`) works on any host with the package built by bench/package.sh.
"""
