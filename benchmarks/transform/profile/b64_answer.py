"""CPU of a script's in-process REST call with one base64 JPEG: the fast decode (``model_answer``)
against the general path (``_call_model``), serial calls on one model, each checked equal first.

    python benchmarks/transform/profile/b64_answer.py JPEG_DIR SAVEDMODEL_VERSION_DIR
"""
import base64, os, time, sys
from tfbatch.runtime import ModelServer, jsonenc
from tfbatch.handlers.service import InferenceService
d = sys.argv[1]
files = sorted(os.listdir(d))[:1000]
bodies = [{"instances": [{"b64": base64.b64encode(open(os.path.join(d, f), "rb").read()).decode()}]} for f in files]
server = ModelServer({"model": {1: sys.argv[2]}})
svc = InferenceService(server)
fast = lambda b: svc.model_answer(b, "model", None, "predict")
general = lambda b: jsonenc.dumps(svc._call_model(b, "model", None, "predict"))
for b in bodies[:20]:
    assert fast(b) == general(b)
for r in range(3):
    for name, fn in (("general", general), ("fast", fast)):
        t = time.process_time(); w = time.perf_counter()
        for b in bodies: fn(b)
        print(name, f"{(time.process_time()-t)/len(bodies)*1e3:.3f} ms CPU/call, {(time.perf_counter()-w)/len(bodies)*1e3:.3f} wall")
server.close()
