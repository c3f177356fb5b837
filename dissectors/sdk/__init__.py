"""What plugin authors use besides the plugin API: ``dissectors.sdk.testing`` (test
helpers).  Kept apart from ``dissectors.api`` so that a run, which imports the API,
never loads test code; nothing in the product imports this package."""
