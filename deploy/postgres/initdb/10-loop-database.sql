-- Run once, when the postgres service creates its data volume: the loop's run store gets a
-- database of its own beside the leave database ("leave", made by the image).
CREATE DATABASE loop;
