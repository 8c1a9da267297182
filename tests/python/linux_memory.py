"""What Linux says of this process's memory, for the huge-page gates: the
/proc/self/smaps lines of the mapping holding an address, and the transparent huge
page mode."""


def smaps_region(address: int) -> list[str]:
    """The /proc/self/smaps lines of the mapping that holds ``address``."""
    lines, inside = [], False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and all(c in "0123456789abcdef-" for c in head):
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= address < hi
            if inside:
                lines.append(line)
    return lines


def thp_mode() -> str:
    """"always", "madvise" or "never" (/sys/kernel/mm/transparent_hugepage/enabled)."""
    with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
        return f.read().split("[")[1].split("]")[0]


def thp_eligible(address: int) -> str:
    """The THPeligible field ("0" or "1") of the mapping holding ``address``."""
    eligible = [line for line in smaps_region(address) if line.startswith("THPeligible:")]
    assert eligible, "smaps has no THPeligible line"
    return eligible[0].split()[1]
