"""The tasks a job or an estimator learns (the values of the ``task`` setting)."""
CLASSIFICATION = "classification"
REGRESSION = "regression"
