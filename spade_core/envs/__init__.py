"""The generated-environment contract, the seed environment library and the Gymnasium wrapper."""
