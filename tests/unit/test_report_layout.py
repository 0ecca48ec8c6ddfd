"""The report's layered layout: boxes of a layer never overlap, forward edges point down,
sources sit just above their first user, and edges against the order are kept apart."""
import random

from graphcap.html_report.layout import layout


def _overlap(a, b):
    return abs(a.x - b.x) < (a.width + b.width) / 2 and abs(a.y - b.y) < (a.height + b.height) / 2


def test_random_dags_lay_out_without_overlaps_and_with_downward_edges():
    rng = random.Random(0)
    for _ in range(20):
        n = rng.randint(2, 60)
        sizes = {f"v{i}": (rng.randint(40, 160), 26, i) for i in range(n)}
        edges = list({(f"v{a}", f"v{b}") for a, b in
                      ((rng.randrange(n), rng.randrange(n)) for _ in range(n * 2)) if a < b})
        drawing = layout(sizes, edges)
        boxes = list(drawing.boxes.values())
        assert len(boxes) == n
        for i, a in enumerate(boxes):
            for b in boxes[i + 1:]:
                assert not _overlap(a, b), (a, b)
        for src, dst, pts in drawing.edges:
            assert drawing.boxes[src].y < drawing.boxes[dst].y
            assert pts[0][1] <= pts[-1][1]
        assert min(b.x - b.width / 2 for b in boxes) >= 0
        assert max(b.x + b.width / 2 for b in boxes) <= drawing.width


def test_a_source_is_placed_just_above_its_first_user():
    sizes = {"x": (40, 26, 0), "a": (40, 26, 1), "b": (40, 26, 2), "c": (40, 26, 3), "w": (40, 26, 0.5)}
    drawing = layout(sizes, [("x", "a"), ("a", "b"), ("b", "c"), ("w", "c")])
    assert drawing.boxes["w"].layer == drawing.boxes["c"].layer - 1


def test_edges_against_the_order_are_back_edges():
    sizes = {"a": (40, 26, 0), "b": (40, 26, 1)}
    drawing = layout(sizes, [("a", "b"), ("b", "a")])
    assert drawing.back_edges == [("b", "a")]
    assert [(s, d) for s, d, _ in drawing.edges] == [("a", "b")]
