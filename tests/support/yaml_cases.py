"""YAML documents the daemon's config loader must refuse, shared by the config and fault tests."""

from __future__ import annotations


def alias_bomb(levels: int = 7, fanout: int = 10) -> str:
    """Mappings of ``fanout`` aliases to the level below, ``levels`` deep: fanout**levels leaves."""
    keys = ", ".join(f"k{j}: x" for j in range(fanout))
    lines = ["defaults:", f"  a0: &a0 {{{keys}}}"]
    for level in range(1, levels + 1):
        refs = ", ".join(f"k{j}: *a{level - 1}" for j in range(fanout))
        lines.append(f"  a{level}: &a{level} {{{refs}}}")
    return "\n".join(lines) + "\n"
