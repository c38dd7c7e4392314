"""Which scripts make a batch job keep its hooks in process: those holding TensorFlow."""

from __future__ import annotations

import json
import types

from tfbatch.handlers.inline_pool import imports_tensorflow


def _module(**values) -> types.ModuleType:
    module = types.ModuleType("inference")
    vars(module).update(values)
    return module


def test_a_script_holding_tensorflow_or_a_name_from_it_counts():
    assert imports_tensorflow(_module(tf=types.ModuleType("tensorflow")))
    assert imports_tensorflow(_module(train=types.ModuleType("tensorflow.train")))
    assert imports_tensorflow(_module(keras=types.ModuleType("keras")))
    example = type("Example", (), {"__module__": "tensorflow.core.example.example_pb2"})
    assert imports_tensorflow(_module(Example=example))


def test_a_script_without_tensorflow_does_not():
    assert not imports_tensorflow(_module(json=json, base64=types.ModuleType("base64")))
    assert not imports_tensorflow(_module(tensorflowish=types.ModuleType("tensorflowish"), n=3))
    assert not imports_tensorflow(_module())


def test_on_few_cores_any_script_keeps_its_hooks_in_process():
    from tfbatch.handlers.inline_pool import MIN_CORES_FOR_WORKERS, in_process_reason

    plain = _module(json=json)
    assert in_process_reason(plain, MIN_CORES_FOR_WORKERS) is None
    assert "core" in in_process_reason(plain, MIN_CORES_FOR_WORKERS - 1)
    assert "TensorFlow" in in_process_reason(_module(tf=types.ModuleType("tensorflow")), 64)
    # A single handler's model calls are answered in this process: on any number of cores.
    assert "single handler" in in_process_reason(plain, 64, single_handler=True)


def test_a_script_holding_an_image_library_decodes_images():
    from tfbatch.handlers.inline_pool import decodes_images

    assert decodes_images(_module(Image=types.ModuleType("PIL.Image"), np=types.ModuleType("numpy")))
    assert decodes_images(_module(cv2=types.ModuleType("cv2")))
    assert decodes_images(_module(imread=type("f", (), {"__module__": "imageio.v3"})))
    assert decodes_images(_module(resize=type("f", (), {"__module__": "skimage.transform._warps"})))
    assert not decodes_images(_module(json=json, base64=types.ModuleType("base64"), np=types.ModuleType("numpy")))
    assert not decodes_images(_module(pillowish=types.ModuleType("PILlow_tools")))


def test_hooks_that_decode_images_take_worker_processes_from_two_cores():
    from tfbatch.handlers.inline_pool import in_process_reason

    pil = _module(Image=types.ModuleType("PIL.Image"), json=json)
    assert in_process_reason(pil, 2) is None
    assert "1 core(s)" in in_process_reason(pil, 1)
    assert in_process_reason(_module(json=json), 2) is not None  # base64-wrapping: the adaptive pool decides
    assert "single handler" in in_process_reason(pil, 2, single_handler=True)
    tf_and_pil = _module(Image=types.ModuleType("PIL.Image"), tf=types.ModuleType("tensorflow"))
    assert "TensorFlow" in in_process_reason(tf_and_pil, 2)


def test_payloads_of_many_records_take_worker_processes_from_two_cores():
    from tfbatch.handlers.inline_pool import MIN_CORES_FOR_WORKERS, in_process_reason

    plain = _module(json=json)
    assert MIN_CORES_FOR_WORKERS > 2
    assert in_process_reason(plain, 2, many_records=True) is None
    assert in_process_reason(plain, 2) is not None  # one record a request: the adaptive pool decides
    assert "1 core(s)" in in_process_reason(plain, 1, many_records=True)
    # What keeps hooks in this process on any number of cores still does with many records.
    assert "TensorFlow" in in_process_reason(_module(tf=types.ModuleType("tensorflow")), 64, many_records=True)
    assert "single handler" in in_process_reason(plain, 64, single_handler=True, many_records=True)


def test_hook_threads_are_reused_between_hops():
    import threading

    from tfbatch.handlers.inline_pool import HookThreads

    threads = HookThreads()
    seen = []
    for _ in range(50):
        done = threading.Event()
        threads.run(lambda: (seen.append(threading.current_thread()), done.set()))
        assert done.wait(30)
    assert threads.started == 1 and len(set(seen)) == 1
    threads.close()
    seen[0].join(30)
    assert not seen[0].is_alive()


def test_a_stuck_hop_does_not_hold_up_the_next_one():
    import threading

    from tfbatch.handlers.inline_pool import HookThreads

    threads = HookThreads()
    release, second = threading.Event(), threading.Event()
    threads.run(lambda: release.wait(60))
    threads.run(second.set)
    assert second.wait(30)  # ran on another thread while the first is still stuck
    assert threads.started == 2
    release.set()
    threads.close()


def test_an_idle_hook_thread_ends_by_itself():
    import threading

    from tfbatch.handlers.inline_pool import HookThreads

    threads = HookThreads(idle_s=0.01)
    ran = []
    done = threading.Event()
    threads.run(lambda: (ran.append(threading.current_thread()), done.set()))
    assert done.wait(30)
    ran[0].join(30)
    assert not ran[0].is_alive()
    done.clear()
    threads.run(done.set)  # a later hop gets a new thread
    assert done.wait(30) and threads.started == 2
    threads.close()
