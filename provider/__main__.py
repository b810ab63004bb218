"""The llm-serving package's plugin: the Pulumi engine runs `python <this directory> <engine address>` and this
serves the library's components (llm_serving/package.py) to TypeScript, Go, C#, Java and YAML programs."""

from llm_serving.package import main

if __name__ == "__main__":
    main()
