-- 0300 (templates): named, versioned workspace specs (workspace.Template,
-- its JSON in body). A version is never changed once written; deleting a
-- template removes every version, refused while a workspace uses one.
CREATE TABLE templates (
    name       TEXT NOT NULL,
    version    INTEGER NOT NULL,
    body       TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (name, version)
);
