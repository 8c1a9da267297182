"""Stop strings over streamed text pieces."""
import pytest

from metalrt.runner.stopping import StopStrings


def stream(stops, pieces):
    s, out = StopStrings(stops), []
    for piece in pieces:
        text, hit = s.feed(piece)
        out.append(text)
        if hit:
            return out, True
    out.append(s.flush())
    return out, False


def test_stop_string_split_across_pieces_is_cut_and_never_shown():
    out, hit = stream(["<end>"], ["Hello <e", "n", "d> more"])
    assert hit and "".join(out) == "Hello " and out[0] == "Hello "


def test_false_start_is_released():
    out, hit = stream(["<end>"], ["a <e", "x", "b"])
    assert not hit and "".join(out) == "a <exb"


@pytest.mark.parametrize("pieces", [["abcSTOPdef"], ["abcST", "OP"], ["a", "b", "c", "S", "T", "O", "P"]])
def test_earliest_of_several_stops(pieces):
    out, hit = stream(["OP", "STOP", "zzz"], pieces)
    assert hit and "".join(out) == "abc"


def test_no_stops_passes_everything():
    out, hit = stream([], ["x", "y"])
    assert not hit and out == ["x", "y", ""]
    out, hit = stream([""], ["x"])
    assert not hit and "".join(out) == "x"
