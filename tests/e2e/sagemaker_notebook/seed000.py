"""The seed-000 notebook's Python cells, in order, run by the SageMaker Python SDK v2 against
``tfbatch api``. The only edits, each marked CHANGED: a role ARN string instead of
``get_execution_role()`` and ``sagemaker.Session(default_bucket=...)``; the AWS_ENDPOINT_URL_*
variables come from the environment. Shell cells (``!aws s3 ...``, ``!tar``, ``!saved_model_cli``)
are done by the test around this script; the ``!aws s3 cp`` of one output is done here with
the SDK's own S3Downloader so that the notebook's JSON cell reads the same file.
After the notebook: deploy -> predict -> delete (the real-time half the notebook describes).
"""

# --- Setup ----------------------------------------------------------------------------------
import numpy as np
import os
import sagemaker

sagemaker_session = sagemaker.Session(default_bucket=os.environ["NOTEBOOK_BUCKET"])  # CHANGED
role = "arn:aws:iam::000000000000:role/SageMakerExecutionRole"  # CHANGED: get_execution_role()

region = sagemaker_session.boto_region_name
bucket = sagemaker_session.default_bucket()
prefix = "sagemaker/DEMO-tf-batch-inference-jpeg-images-python-sdk"
print("Region: {}".format(region))
print("S3 URI: s3://{}/{}".format(bucket, prefix))
print("Role:   {}".format(role))

# --- Packaging a Model / creating it --------------------------------------------------------
import os
import sagemaker
from sagemaker.tensorflow.serving import Model

s3_path = "s3://{}/{}".format(bucket, prefix)

model_data = sagemaker_session.upload_data("model.tar.gz", bucket, os.path.join(prefix, "model"))

tensorflow_serving_model = Model(
    model_data=model_data, role=role, framework_version="1.13", sagemaker_session=sagemaker_session
)

input_path = "s3://sagemaker-sample-data-{}/batch-transform/open-images/jpg".format(region)

print("Model data S3 path: {}".format(model_data))
print("Input S3 path: {}".format(input_path))

# --- Run a Batch Transform job --------------------------------------------------------------
output_path = os.path.join(s3_path, "output")
tensorflow_serving_transformer = tensorflow_serving_model.transformer(
    instance_count=2,
    instance_type="ml.p3.2xlarge",
    max_concurrent_transforms=64,
    max_payload=1,
    output_path=output_path,
)

print("Transform input S3 path:  {}".format(input_path))
print("Transform output S3 path: {}".format(output_path))
tensorflow_serving_transformer.transform(input_path, content_type="application/x-image")
tensorflow_serving_transformer.wait()

# --- Inspecting one output (the notebook's `!aws s3 cp {output_path}/00000b4dcff7f799.jpg.out .`)
from sagemaker.s3 import S3Downloader

S3Downloader.download(output_path + "/00000b4dcff7f799.jpg.out", ".", sagemaker_session=sagemaker_session)

import json

with open("00000b4dcff7f799.jpg.out", "r") as f:
    jstr = json.load(f)
    print(jstr)

    # Subtracting 1 for "background" class
    class_index = jstr["predictions"][0]["classes"] - 1
    print(type(jstr))
    probabilities = jstr["predictions"][0]["probabilities"]
    print(probabilities)
    import numpy as np

    probs = np.argmax(probabilities)
    print(probs)
    print(probabilities[class_index + 1])

    # Index 864 corresponds to "tow truck"
    print("Class index: {}".format(class_index))

# --- Real time: deploy -> predict -> delete -------------------------------------------------
from sagemaker.serializers import IdentitySerializer

predictor = tensorflow_serving_model.deploy(initial_instance_count=1, instance_type="ml.m5.xlarge")
predictor.serializer = IdentitySerializer(content_type="application/x-image")
with open("00000b4dcff7f799.jpg", "rb") as f:
    realtime = predictor.predict(f.read())
print("REALTIME " + json.dumps(realtime))
print("ENDPOINT " + predictor.endpoint_name)
predictor.delete_endpoint()
