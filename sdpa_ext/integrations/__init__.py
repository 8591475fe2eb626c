"""Integrations of sdpa_ext with other libraries, each in its own module behind an optional extra.

Import the one you need (`import sdpa_ext.integrations.transformers`): this package imports none of them, so that
`import sdpa_ext` never pulls in a library the caller did not install.
"""
