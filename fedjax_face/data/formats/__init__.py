"""The file formats face data comes in, read without their original frameworks: insightface
RecordIO (`recordio`), verification `.bin` pair sets (`verification_bin`), image folders and pair
lists (`image_folder`), TFDS (`tfds_source`). Each reader names the file and record it refuses."""
