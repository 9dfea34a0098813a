"""squall.testing.components: the helpers tests name their recorders with."""
import threading

from squall.testing.components import unique_name


def test_unique_names_never_repeat_in_a_process_whatever_the_prefix_or_thread():
    # Two modules that each counted their own names both handed out "boom-1"; one test then
    # read the other's 200 acks and waited in vain for 10.
    names: list[str] = []
    lock = threading.Lock()

    def take(prefix: str) -> None:
        got = [unique_name(prefix) for _ in range(500)]
        with lock:
            names.extend(got)

    threads = [threading.Thread(target=take, args=(prefix,)) for prefix in ("boom", "boom", "wc", "boom")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(names) == 2000 and len(set(names)) == 2000
    assert all(name.startswith(("boom-", "wc-")) for name in names)
