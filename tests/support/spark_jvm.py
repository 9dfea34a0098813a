"""Java options for the Spark tier's JVMs, which run jobs of seconds on a few hundred rows.

The JIT's optimising compiler (C2) and the parallel collector's threads cost such JVMs more
CPU than they give back: a small local job (one RDD shuffle, one SQL aggregation) took 64
CPU-s with Java's defaults and 39 CPU-s with these, side by side. What runs, and every
result, is the same."""

SMALL_JOB_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
# Where Spark's launcher reads them: drivers (`spark-submit`, so a PySpark session,
# `squall spark-run` and the docs pages' blocks) and a standalone master and worker.
# Executors of a standalone cluster take spark.executor.extraJavaOptions instead.
ENV = ("SPARK_SUBMIT_OPTS", "SPARK_DAEMON_JAVA_OPTS")
