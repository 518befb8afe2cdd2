"""Where stacks come from and where runs happen: the image matrix and its locks, image builds, the base image,
Slurm/Kubernetes manifests, wheel-overlay stacks, the host runner and the files a wheel ships."""
